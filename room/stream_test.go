package room_test

import (
	"context"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/internal/roomtest"
)

// The room stream is created with roompub's duplicate window, as the
// server reports it back; an existing stream with another window (the
// server's default of 2 minutes, as streams created before had) is still
// sound, and the advice names the command that sets it.
func TestStreamDuplicateWindow(t *testing.T) {
	e := roomtest.NewEnv(t)
	got := e.Stream.CachedInfo().Config
	if got.Duplicates != 30*time.Second || room.DuplicateWindowAdvice(got) != "" {
		t.Fatalf("created with duplicate window %s; advice %q", got.Duplicates, room.DuplicateWindowAdvice(got))
	}
	ctx := context.Background()
	cfg := room.StreamConfig("OLD", room.Subjects{Prefix: "old"}, 1)
	cfg.Duplicates = 0
	st, err := e.Js.CreateStream(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	old := st.CachedInfo().Config
	if old.Duplicates != 2*time.Minute {
		t.Fatalf("the server's default window is %s", old.Duplicates)
	}
	if err := room.CheckStreamConfig(old, room.Subjects{Prefix: "old"}); err != nil {
		t.Fatalf("a stream with the server's window is append-only all the same: %v", err)
	}
	want := "stream OLD keeps message ids for 2m0s, not 30s: the server's memory for them grows with the window " +
		"(docs/operations.md, \"The duplicate window\"); to set it: nats stream edit OLD --dupe-window 30s"
	if a := room.DuplicateWindowAdvice(old); a != want {
		t.Fatalf("advice %q", a)
	}
	if a := room.DuplicateWindowAdvice(jetstream.StreamConfig{Name: "X"}); a != "stream X keeps message ids for the server's default (2m0s), not 30s: the server's memory for them grows with the window "+
		"(docs/operations.md, \"The duplicate window\"); to set it: nats stream edit X --dupe-window 30s" {
		t.Fatalf("advice for an unset window %q", a)
	}
	// The window alone can be set on the existing stream by an update:
	// the server takes it, and the stream stays append-only.
	old.Duplicates = room.DuplicateWindow
	st, err = e.Js.UpdateStream(ctx, old)
	if err != nil || st.CachedInfo().Config.Duplicates != room.DuplicateWindow || room.CheckStreamConfig(st.CachedInfo().Config, room.Subjects{Prefix: "old"}) != nil {
		t.Fatalf("update: %v", err)
	}
}

// TestStreamMetadataSettings: StreamConfig makes the room stream with
// record markers and the attestations' compact form on; an existing
// stream without one keeps it off (EnsureStream never updates a stream),
// its advice names the edit, and the edited stream has it and is still
// append-only.
func TestStreamMetadataSettings(t *testing.T) {
	e := roomtest.NewEnv(t)
	ctx := context.Background()
	for _, tc := range []struct {
		key, value string
		on         func(jetstream.StreamConfig) bool
		advice     func(jetstream.StreamConfig) string
		want       string // the advice for stream OLD
	}{
		// `nats stream edit --metadata` replaces the whole map: the
		// command names the keys the stream keeps (an operator's own,
		// quoted for the shell), never the server's "_nats." ones.
		{room.MetadataRecordMarkers, room.MarkersV1, room.RecordMarkers, room.RecordMarkersAdvice,
			"stream OLD has no record markers: serve keeps the record rules of each room in memory, read whole from the stream " +
				"(docs/operations.md, \"Record markers\"); once every serve and reader is at this release: " +
				"nats stream edit OLD --metadata 'owner=team a' --metadata roompub=rooms/v1 --metadata roompub-attestation=compact " +
				"--metadata roompub-record-markers=v1, then restart the serves"},
		{room.MetadataAttestation, room.AttestationCompact, room.CompactAttestations, room.CompactAttestationsAdvice,
			"stream OLD has no compact attestations: the gate writes the batch's signature on every message, about 90 bytes each " +
				"(docs/operations.md, \"The attestation's compact form\"); once every serve and reader is at this release: " +
				"nats stream edit OLD --metadata 'owner=team a' --metadata roompub=rooms/v1 --metadata roompub-attestation=compact " +
				"--metadata roompub-record-markers=v1, then restart the serves"},
	} {
		t.Run(tc.key, func(t *testing.T) {
			got := e.Stream.CachedInfo().Config
			if !tc.on(got) || got.Metadata[tc.key] != tc.value || tc.advice(got) != "" {
				t.Fatalf("created with metadata %v; advice %q", got.Metadata, tc.advice(got))
			}
			subj := room.Subjects{Prefix: "old"}
			cfg := room.StreamConfig("OLD", subj, 1)
			delete(cfg.Metadata, tc.key)
			cfg.Metadata["owner"] = "team a"
			if _, err := e.Js.CreateStream(ctx, cfg); err != nil {
				t.Fatal(err)
			}
			defer func() {
				if err := e.Js.DeleteStream(ctx, "OLD"); err != nil {
					t.Fatal(err)
				}
			}()
			st, err := room.EnsureStream(ctx, e.Js, room.StreamConfig("OLD", subj, 1), subj)
			if err != nil {
				t.Fatalf("a stream without %s is append-only all the same: %v", tc.key, err)
			}
			old := st.CachedInfo().Config
			if tc.on(old) {
				t.Fatalf("EnsureStream set %s on an existing stream: %v", tc.key, old.Metadata)
			}
			if a := tc.advice(old); a != tc.want {
				t.Fatalf("advice %q", a)
			}
			if hasServerKey := slices.ContainsFunc(slices.Collect(maps.Keys(old.Metadata)), func(k string) bool { return strings.HasPrefix(k, "_nats.") }); !hasServerKey {
				t.Fatalf("the server set no _nats. metadata: %v", old.Metadata)
			}
			// The edit the advice names: the server takes it, and the
			// stream stays append-only.
			old.Metadata[tc.key] = tc.value
			st, err = e.Js.UpdateStream(ctx, old)
			if err != nil || !tc.on(st.CachedInfo().Config) || room.CheckStreamConfig(st.CachedInfo().Config, subj) != nil {
				t.Fatalf("update: %v %v", err, st.CachedInfo().Config.Metadata)
			}
		})
	}
}
