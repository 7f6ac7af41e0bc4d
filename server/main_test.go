package server_test

import (
	"flag"
	"fmt"
	"os"
	"testing"
)

// TestMain checks, after a full run of the package's tests, that every
// operation of the OpenAPI document was called and its answers checked.
func TestMain(m *testing.M) {
	flag.Parse()
	code := m.Run()
	if code == 0 && flag.Lookup("test.run").Value.String() == "" && confDoc != nil {
		var missing []string
		for _, op := range confDoc.operations() {
			if len(confDoc.seen[op]) == 0 {
				missing = append(missing, op)
			}
		}
		if len(missing) > 0 {
			fmt.Fprintf(os.Stderr, "FAIL: no test called these operations of openapi.json, so their answers went unchecked: %v\n", missing)
			code = 1
		}
	}
	os.Exit(code)
}
