package room_test

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"testing"

	fastjson "github.com/segmentio/encoding/json"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
)

// repliesOf builds a reply of every wire type from fuzzed strings and numbers.
func repliesOf(ss [6]string, n int64) []any {
	seq := n
	item := room.ItemResult{Index: int(n % 1000), Outcome: room.Outcome(ss[0]), Seq: &seq, Hash: ss[1], StreamSeq: uint64(n), Subject: ss[2],
		Code: events.Code(ss[3]), At: &events.Location{File: ss[4], Line: int(n % 7), Seq: uint64(n), Pointer: ss[5]}, Reason: ss[4],
		Problems: []events.Problem{{Code: events.Code(ss[0]), At: events.Location{Pointer: ss[1]}, Reason: ss[2], Expected: ss[3], Actual: ss[5]}}}
	plain := room.ItemResult{Index: 3, Outcome: room.OutcomeStored, Seq: &seq, Hash: ss[1], StreamSeq: 9, Subject: ss[2]}
	key := events.ChainKey{RunID: ss[0], CapsuleID: ss[1]}
	head := room.ChainHead{RoomID: ss[2], Chain: key, Next: n, Head: ss[3], StreamSeq: uint64(n)}
	return []any{
		room.JournalReply{RoomID: ss[0], Chain: key, Items: []room.ItemResult{item, plain, {Index: 2, Outcome: room.OutcomeSkipped}}, Head: head, Stored: 1, Skipped: 1},
		room.JournalReply{RoomID: ss[0]},
		room.RecordReply{RoomID: ss[5], Item: item},
		room.RecordsReply{Records: []room.RecordReply{{RoomID: ss[5], Item: item}, {Item: plain}}, Stored: 1, Refused: 1, Trimmed: ss[3]},
		head,
		room.ErrorReply{Code: events.Code(ss[3]), Reason: ss[4]},
	}
}

// checkReplyJSON holds segmentio/encoding/json (the service's encoder, the client's
// decoder) against encoding/json: the same bytes out, the same values in.
func checkReplyJSON(t *testing.T, ss [6]string, n int64) {
	t.Helper()
	for _, v := range repliesOf(ss, n) {
		want, werr := json.Marshal(v)
		got, gerr := fastjson.Marshal(v)
		if (werr == nil) != (gerr == nil) || !bytes.Equal(got, want) {
			t.Fatalf("%T: segmentio %q (%v), encoding/json %q (%v)", v, got, gerr, want, werr)
		}
		typ := reflect.TypeOf(v)
		w, g := reflect.New(typ), reflect.New(typ)
		werr = json.Unmarshal(want, w.Interface())
		gerr = fastjson.Unmarshal(want, g.Interface())
		if werr != nil || gerr != nil || !reflect.DeepEqual(w.Interface(), g.Interface()) {
			t.Fatalf("%T from %q: segmentio %+v (%v), encoding/json %+v (%v)", v, want, g.Elem(), gerr, w.Elem(), werr)
		}
	}
}

// TestReplyJSON: random strings (HTML characters, line separators, control
// characters, invalid UTF-8, emoji) in every string field of every reply.
func TestReplyJSON(t *testing.T) {
	alphabet := []string{"a", "Z", "<", ">", "&", `"`, `\`, "/", "\u2028", "\u2029", "é", "\x00", "\x1f", "\x7f", "\xff", "\xc3", "\xed\xa0\x80", "😀", "\t", "\n", "\r", " "}
	rng := rand.New(rand.NewPCG(8, 8))
	for range 5000 {
		var ss [6]string
		for i := range ss {
			var b []byte
			for range rng.IntN(10) {
				b = append(b, alphabet[rng.IntN(len(alphabet))]...)
			}
			ss[i] = string(b)
		}
		checkReplyJSON(t, ss, rng.Int64())
	}
}

// FuzzReplyJSON is TestReplyJSON with the fuzzer's strings.
func FuzzReplyJSON(f *testing.F) {
	f.Add("stored", "a3f1", "rooms.a.journal.r.c", "fork", "<file>&", "/seq", int64(7))
	f.Add("\u2028", "\xff\xfe", "\x00", "\"\\", "😀", "\xed\xa0\x80", int64(-1))
	f.Fuzz(func(t *testing.T, a, b, c, d, e, g string, n int64) {
		checkReplyJSON(t, [6]string{a, b, c, d, e, g}, n)
	})
}
