// Package msgpackcheck vets MessagePack read from a store before a decoder
// sees it, so a corrupt or hostile record costs an error, never the process.
//
// The MessagePack library trusts declared lengths: a string, binary or
// extension header may declare up to 4 GiB, an array or map up to 4 Gi
// items, and the library allocates toward that before it finds the input
// short. Its pooled decoders keep the grown buffer, so every such record
// grows the next decode's buffer further until the process runs out of
// memory (a fatal error no recover catches). Its skipping and its decoding
// into interface values also recurse once per nesting level.
//
// The library also reads the payload of an extension found where a map is
// expected as that map, with its own declared lengths.
//
// [Check] walks the bytes once, without recursion, and accepts exactly one
// value whose every declared length and item count fits in the bytes that
// follow it, nested no deeper than a limit the caller chooses, using no
// reserved type byte and no extension (timestamps only where the caller
// stores time.Time values), with nothing after it. Bytes that pass cost
// the decoder O(len(b)) memory and a stack as deep as the limit (with
// timestamps admitted, see Options.Timestamps for the one exception).
// [Len] makes the same walk over the first value alone and returns its
// length, so a decoder can step over fields it does not need (the
// queue's job-state reader does). [Unmarshal] is Check followed by the
// library's decode, with a decoder panic on unexpected shapes returned as
// an error.
//
// It makes no object-store requests and does not check what the value
// means: callers still validate the decoded record and wrap every error
// in their own corruption sentinel.
package msgpackcheck
