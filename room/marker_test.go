package room_test

import (
	"testing"

	"github.com/roompub/roompub/room"
)

// TestParseMarkerTakesOnlyItsOneForm: a marker's body is read back only
// in the form Encode writes; any other spelling of the same members, an
// unknown member, a repeated one, anything after the object or an offset
// of 0 is refused.
func TestParseMarkerTakesOnlyItsOneForm(t *testing.T) {
	pos := uint64(7)
	for _, want := range []room.Marker{
		{Record: "sha256:abc", Offset: 1},
		{Record: "sha256:abc", Offset: 3, Outcome: "unknown"},
		{Record: "sha256:abc", Offset: 4, Position: &pos},
	} {
		got, err := room.ParseMarker(want.Encode())
		if err != nil || got.Record != want.Record || got.Offset != want.Offset || got.Outcome != want.Outcome ||
			(got.Position == nil) != (want.Position == nil) || (got.Position != nil && *got.Position != *want.Position) {
			t.Errorf("%s: %+v, %v", want.Encode(), got, err)
		}
	}
	for _, body := range []string{
		`{"record":"sha256:abc","offset":0}`,
		`{"record":"","offset":1}`,
		`{"record":"sha256:abc"}`,
		`{"Record":"sha256:abc","offset":1}`,
		`{"offset":1,"record":"sha256:abc"}`,
		`{"record":"sha256:abc", "offset":1}`,
		`{"record":"sha256:abc","offset":1,"extra":1}`,
		`{"record":"sha256:x","record":"sha256:abc","offset":1}`,
		`{"record":"sha256:abc","offset":1}{}`,
		`{"record":"sha256:abc","offset":1} `,
		`{"record":"sha256:abc","offset":1.0}`,
		`{"record":"sha256:abc","offset":1,"outcome":""}`,
		`{"record":"sha256:\u0061bc","offset":1}`,
		`[]`,
		``,
	} {
		if m, err := room.ParseMarker([]byte(body)); err == nil {
			t.Errorf("%s: read as %+v", body, m)
		}
	}
}

// FuzzParseMarker: a marker body read off the stream (anyone with the
// stream's rights writes one) parses or is refused without a panic, and
// what parses is in the one form Encode writes, byte for byte.
func FuzzParseMarker(f *testing.F) {
	pos := uint64(7)
	for _, m := range []room.Marker{{Record: "sha256:abc", Offset: 1}, {Record: "sha256:abc", Offset: 3, Outcome: "unknown"}, {Record: "sha256:abc", Offset: 4, Position: &pos}} {
		f.Add(m.Encode())
	}
	f.Add([]byte(`{"record":"sha256:abc","offset":18446744073709551615}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := room.ParseMarker(data)
		if err != nil {
			return
		}
		if m.Record == "" || m.Offset == 0 || string(m.Encode()) != string(data) {
			t.Fatalf("parsed %+v from %q, which encodes as %q", m, data, m.Encode())
		}
	})
}

// FuzzParseSource: a Roompub-Source header parses only in the form
// FormatSource writes.
func FuzzParseSource(f *testing.F) {
	for _, s := range []string{"ROOMS 1", "ROOMS-2 18446744073709551615", "ROOMS 01", " 1", "ROOMS", "ROOMS 1 2"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		stream, seq, ok := room.ParseSource(v)
		if ok && (stream == "" || room.FormatSource(stream, seq) != v) {
			t.Fatalf("ParseSource(%q) = %q %d, which formats as %q", v, stream, seq, room.FormatSource(stream, seq))
		}
	})
}
