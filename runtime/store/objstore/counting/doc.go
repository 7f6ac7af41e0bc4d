// Package counting wraps an objstore.Store and counts requests and bytes per
// operation kind. Benchmarks report requests per operation from it; tests
// assert request budgets with it. Counting adds no requests.
package counting
