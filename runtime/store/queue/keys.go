package queue

import (
	"bytes"
	"encoding/binary"
	"strings"
	"time"
	"unicode/utf8"
)

// Key layout inside the kv (see doc.go). q is a queue name, which never
// contains 0x00, so "<q>\x00" is a prefix no other queue's keys share.
//
//	j/<id>                         job record (msgpack, small: no payload)
//	p/<id>                         payload over 1 KiB (smaller ones are in the record)
//	e/<id>                         effects recorded by Cancel on a claimed job
//	r/<q>\x00<prio:8><seq:8>       pending (ready) index -> id; claim order
//	s/<q>\x00<runAt:8><id>         scheduled index
//	c/<q>\x00<id>                  claimed index
//	t/<q>\x00<completedAt:8><id>   done index (retention)
//	x/<q>\x00<failedAt:8><id>      dead index (retention)
//	u/<q>\x00<dedup key>           dedup index -> id, while pending/scheduled
//	n/<q>\x00<state>               stats counter (kv counter, Add only)
//	k/<key>                        caller KV
const (
	pfxJob       = "j/"
	pfxPayload   = "p/"
	pfxEffects   = "e/"
	pfxReady     = "r/"
	pfxScheduled = "s/"
	pfxClaimed   = "c/"
	pfxDone      = "t/"
	pfxDead      = "x/"
	pfxDedup     = "u/"
	pfxCount     = "n/"
	pfxKV        = "k/"
)

func jobKey(id string) []byte     { return []byte(pfxJob + id) }
func payloadKey(id string) []byte { return []byte(pfxPayload + id) }
func effectsKey(id string) []byte { return []byte(pfxEffects + id) }
func kvKey(key string) []byte     { return []byte(pfxKV + key) }

// queuePrefix is "<pfx><q>\x00".
func queuePrefix(pfx, q string) []byte { return queueKey(pfx, q, 0) }

// queueKey is queuePrefix with room for extra more bytes, so building an
// index key allocates once.
func queueKey(pfx, q string, extra int) []byte {
	b := make([]byte, 0, len(pfx)+len(q)+1+extra)
	b = append(b, pfx...)
	b = append(b, q...)
	return append(b, 0)
}

// sortableInt maps an int64 to a uint64 whose big-endian bytes sort like the int.
func sortableInt(v int64) uint64 { return uint64(v) ^ (1 << 63) }

func unsortableInt(u uint64) int64 { return int64(u ^ (1 << 63)) }

func appendTime(b []byte, t int64) []byte { return binary.BigEndian.AppendUint64(b, sortableInt(t)) }

// readyKey orders by descending priority, then ascending seq (FIFO).
func readyKey(q string, prio int, seq uint64) []byte {
	b := queueKey(pfxReady, q, 16)
	b = binary.BigEndian.AppendUint64(b, ^sortableInt(int64(prio)))
	return binary.BigEndian.AppendUint64(b, seq)
}

// readySeq extracts the seq of a ready key of queue q.
func readySeq(q string, key []byte) (uint64, bool) {
	n := len(pfxReady) + len(q) + 1
	if len(key) != n+16 {
		return 0, false
	}
	return binary.BigEndian.Uint64(key[n+8:]), true
}

func timeIndexKey(pfx, q string, t int64, id string) []byte {
	b := appendTime(queueKey(pfx, q, 8+len(id)), t)
	return append(b, id...)
}

// timeIndexParts splits a s/, t/ or x/ key of queue q into time and id.
func timeIndexParts(pfx, q string, key []byte) (int64, string, bool) {
	n := len(pfx) + len(q) + 1
	if len(key) <= n+8 {
		return 0, "", false
	}
	return unsortableInt(binary.BigEndian.Uint64(key[n:])), string(key[n+8:]), true
}

func scheduledKey(q string, runAt int64, id string) []byte {
	return timeIndexKey(pfxScheduled, q, runAt, id)
}
func doneKey(q string, at int64, id string) []byte { return timeIndexKey(pfxDone, q, at, id) }
func deadKey(q string, at int64, id string) []byte { return timeIndexKey(pfxDead, q, at, id) }

func claimedKey(q, id string) []byte { return append(queueKey(pfxClaimed, q, len(id)), id...) }

func dedupKey(q, key string) []byte { return append(queueKey(pfxDedup, q, len(key)), key...) }

// State bytes of the counter keys.
const (
	cntPending   = 'p'
	cntScheduled = 's'
	cntClaimed   = 'c'
	cntDone      = 'd'
	cntDead      = 'x'
)

func countKey(q string, st State) []byte {
	var c byte
	switch st {
	case StatePending:
		c = cntPending
	case StateScheduled:
		c = cntScheduled
	case StateClaimed:
		c = cntClaimed
	case StateDone:
		c = cntDone
	case StateDead:
		c = cntDead
	default:
		return nil
	}
	return append(queueKey(pfxCount, q, 1), c)
}

// queueOfCountKey returns the queue name of an n/ key.
func queueOfCountKey(key []byte) (string, bool) {
	rest, ok := bytes.CutPrefix(key, []byte(pfxCount))
	if !ok {
		return "", false
	}
	i := bytes.IndexByte(rest, 0)
	if i <= 0 {
		return "", false
	}
	return string(rest[:i]), true
}

// prefixEnd returns the first key after every key starting with p.
func prefixEnd(p []byte) []byte {
	end := bytes.Clone(p)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}

// after returns the smallest key greater than k.
func after(k []byte) []byte { return append(bytes.Clone(k), 0) }

// validName checks a queue name, job ID or dedup key.
func validName(what, s string) error {
	if s == "" {
		return invalidf("%s is empty", what)
	}
	if len(s) > MaxNameSize {
		return invalidf("%s %.40q... is %d bytes; the limit is %d", what, s, len(s), MaxNameSize)
	}
	if !utf8.ValidString(s) || strings.ContainsRune(s, 0) {
		return invalidf("%s %q must be valid UTF-8 without NUL bytes", what, s)
	}
	return nil
}

func validKVKey(key string) error {
	if key == "" {
		return invalidf("KV key is empty")
	}
	if len(key) > MaxKVKeySize {
		return invalidf("KV key %.40q... is %d bytes; the limit is %d", key, len(key), MaxKVKeySize)
	}
	return nil
}

func nanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func fromNanos(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}
