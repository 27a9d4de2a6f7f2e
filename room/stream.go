package room

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/roompub/roompub/room/internal/jsapi"
)

// DefaultStream is the name of the stream that holds every room.
const DefaultStream = "ROOMS"

// DefaultLeaseBucket is the JetStream key-value bucket of the rooms'
// checkpoint leases: key LeaseKey(room id) of room/checkpointer, value
// the writer's lease statement (checkpoint.SignLease: node id, time taken
// or renewed, signature). Secure mode grants it to publishers only.
const DefaultLeaseBucket = "ROOMPUB_CHECKPOINT_LEASES"

// ErrStoreLost is wrapped by CheckStoreLoss: the room stream shows
// messages deleted from inside it, which an append-only stream never
// does, so the store lost messages it had acknowledged (a damaged block
// file the server dropped on restart, say).
var ErrStoreLost = errors.New("the store lost acknowledged messages")

// CheckStoreLoss reports what the room stream's state shows the store
// lost: interior deletions (State.NumDeleted) and a first sequence above 1
// (the stream denies deletes and purges and sets no limit, so a deleted
// sequence, or a first one gone, is a lost message). The error wraps
// ErrStoreLost and names the count and up to 10 of the lost stream
// sequences when state lists them (jetstream.WithDeletedDetails); nil
// when nothing is missing.
func CheckStoreLoss(state jetstream.StreamState) error {
	var front error
	if state.FirstSeq > 1 {
		front = fmt.Errorf("%w: the stream's first %d messages are gone (it starts at stream seq %d)", ErrStoreLost, state.FirstSeq-1, state.FirstSeq)
	}
	if state.NumDeleted == 0 {
		return front
	}
	seqs := state.Deleted
	if len(seqs) == 0 {
		return errors.Join(front, fmt.Errorf("%w: %d messages are gone from inside the stream (stream seqs %d to %d)", ErrStoreLost, state.NumDeleted, state.FirstSeq, state.LastSeq))
	}
	first, last := slices.Min(seqs), slices.Max(seqs)
	if len(seqs) > 10 {
		seqs = seqs[:10]
	}
	more := ""
	if len(state.Deleted) > len(seqs) {
		more = " …"
	}
	return errors.Join(front, fmt.Errorf("%w: %d messages are gone, between stream seqs %d and %d (stream seqs %v%s)", ErrStoreLost, state.NumDeleted, first, last, seqs, more))
}

// ErrStreamConfig is wrapped by CheckStreamConfig and EnsureStream when the
// room stream is configured in a way that could lose, change or delete
// evidence.
var ErrStreamConfig = errors.New("room stream is not append-only")

// StreamConfig returns the room stream's configuration (docs/design.md,
// "Stream configuration"): file storage, Limits retention with no limit at all,
// Discard New, no delete, purge or rollup, no TTLs, delete markers,
// counters or schedules, no mirror, source or transform writing into it,
// direct get on for readers, and atomic batch publish (ADR-50) allowed for
// journal backfill and records with their markers. Record markers are on
// (MetadataRecordMarkers), and so is the attestations' compact form
// (MetadataAttestation): only a stream this makes has them; an existing
// stream keeps its metadata (RecordMarkersAdvice,
// CompactAttestationsAdvice). replicas is 1 on one server, 3 on a
// cluster.
// MaxConsumers -1 sets no limit of the stream's own; nats-server then
// applies its default_max_consumers (server.JSDefaultMaxConsumersPerStream,
// 1,000 per stream) unless the account sets one, so consumers can run out:
// the checkpointer reads with direct gets and needs none. Duplicates is
// DuplicateWindow, not the server's 2 minutes.
func StreamConfig(name string, subjects Subjects, replicas int) jetstream.StreamConfig {
	if name == "" {
		name = DefaultStream
	}
	if replicas <= 0 {
		replicas = 1
	}
	return jetstream.StreamConfig{
		Name:               name,
		Description:        "roompub rooms: append-only verified evidence",
		Subjects:           []string{subjects.All()},
		Retention:          jetstream.LimitsPolicy,
		MaxConsumers:       -1,
		MaxMsgs:            -1,
		MaxBytes:           -1,
		MaxAge:             0,
		MaxMsgsPerSubject:  -1,
		MaxMsgSize:         -1,
		Discard:            jetstream.DiscardNew,
		Storage:            jetstream.FileStorage,
		Replicas:           replicas,
		Duplicates:         DuplicateWindow,
		DenyDelete:         true,
		DenyPurge:          true,
		AllowRollup:        false,
		AllowDirect:        true,
		AllowAtomicPublish: true,
		Metadata:           map[string]string{"roompub": "rooms/v1", MetadataRecordMarkers: MarkersV1, MetadataAttestation: AttestationCompact},
	}
}

// DuplicateWindow is the room stream's duplicate window (Duplicates): how
// long the server remembers a Nats-Msg-Id. It only has to cover a gate's
// resend after an ambiguous acknowledgement: a publish timeout (5s), the
// read from the stream leader before deciding (5s) and a backoff (at most
// 2s) make 12s, and 30s leaves a margin of more than twice that.
// Exactly-once does not rest on it: every append expects a last subject
// sequence, and ids come from content (docs/design.md, "The duplicate
// window"). The server keeps an entry per message stored within the
// window, so the window bounds that memory: a bulk fill holds 4 times fewer
// ids than with the server's default of 2 minutes.
const DuplicateWindow = 30 * time.Second

// CheckStreamConfig reports every way cfg departs from an append-only room
// stream, joined, each wrapping ErrStreamConfig; nil when it is sound.
// Replicas and description may differ; subjects must include want. The
// duplicate window may differ too (DuplicateWindow says why no window
// makes a stream weak); DuplicateWindowAdvice says when it is not ours.
func CheckStreamConfig(cfg jetstream.StreamConfig, subjects Subjects) error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrStreamConfig}, args...)...))
	}
	if cfg.Retention != jetstream.LimitsPolicy {
		bad("retention is %s, want limits", cfg.Retention)
	}
	if cfg.MaxMsgs > 0 {
		bad("max_msgs is %d, want no limit", cfg.MaxMsgs)
	}
	if cfg.MaxBytes > 0 {
		bad("max_bytes is %d, want no limit", cfg.MaxBytes)
	}
	if cfg.MaxAge > 0 {
		bad("max_age is %s, want none", cfg.MaxAge)
	}
	if cfg.MaxMsgsPerSubject > 0 {
		bad("max_msgs_per_subject is %d, want no limit", cfg.MaxMsgsPerSubject)
	}
	if cfg.Discard != jetstream.DiscardNew {
		bad("discard is %s, want new", cfg.Discard)
	}
	if !cfg.DenyDelete {
		bad("deny_delete is off")
	}
	if !cfg.DenyPurge {
		bad("deny_purge is off")
	}
	if cfg.AllowRollup {
		bad("allow_rollup_hdrs is on")
	}
	if cfg.AllowMsgTTL {
		bad("allow_msg_ttl is on")
	}
	if cfg.SubjectDeleteMarkerTTL > 0 {
		bad("subject_delete_marker_ttl is %s", cfg.SubjectDeleteMarkerTTL)
	}
	if cfg.AllowMsgCounter {
		bad("allow_msg_counter is on")
	}
	if cfg.AllowMsgSchedules {
		bad("allow_msg_schedules is on")
	}
	if cfg.PersistMode == jetstream.AsyncPersistMode {
		bad("persist_mode is async, want default (acknowledged means stored)")
	}
	if cfg.Mirror != nil {
		bad("the stream is a mirror")
	}
	if len(cfg.Sources) > 0 {
		bad("the stream has %d source(s) writing into it", len(cfg.Sources))
	}
	if cfg.SubjectTransform != nil {
		bad("the stream has a subject transform")
	}
	if cfg.Sealed {
		bad("the stream is sealed")
	}
	if cfg.NoAck {
		bad("no_ack is on")
	}
	if !cfg.AllowDirect {
		bad("allow_direct is off; readers use direct get")
	}
	if cfg.Storage != jetstream.FileStorage {
		bad("storage is %s, want file", cfg.Storage)
	}
	found := false
	for _, s := range cfg.Subjects {
		if s == subjects.All() {
			found = true
		}
	}
	if !found {
		bad("subjects %v do not include %q", cfg.Subjects, subjects.All())
	}
	return errors.Join(errs...)
}

// EnsureStream creates the room stream if it does not exist, and otherwise
// checks that the existing one is append-only (CheckStreamConfig). It
// never updates an existing stream: that is an administrator's act
// (docs/design.md, "Stream configuration"). Errors wrap ErrStreamConfig
// for a weakened stream.
func EnsureStream(ctx context.Context, js jetstream.JetStream, cfg jetstream.StreamConfig, subjects Subjects) (jetstream.Stream, error) {
	ctx, cancel := jsapi.WithDefaultTimeout(ctx, DefaultTimeout)
	defer cancel()
	s, err := js.Stream(ctx, cfg.Name)
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		s, err = js.CreateStream(ctx, cfg)
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			// Another publisher created it first; check theirs.
			s, err = js.Stream(ctx, cfg.Name)
		}
		if err != nil {
			return nil, fmt.Errorf("create stream %s: %w", cfg.Name, err)
		}
	case err != nil:
		return nil, fmt.Errorf("look up stream %s: %w", cfg.Name, err)
	}
	info := s.CachedInfo()
	if err := CheckStreamConfig(info.Config, subjects); err != nil {
		return nil, fmt.Errorf("stream %s: %w", cfg.Name, err)
	}
	return s, nil
}

// DuplicateWindowAdvice returns, for a stream whose duplicate window is
// not DuplicateWindow (an existing stream keeps the window it was created
// with: EnsureStream never updates a stream), what an operator can run to
// set it; "" when it is DuplicateWindow. A window of 0 is the server's
// default, 2 minutes.
func DuplicateWindowAdvice(cfg jetstream.StreamConfig) string {
	if cfg.Duplicates == DuplicateWindow {
		return ""
	}
	have := "the server's default (2m0s)"
	if cfg.Duplicates > 0 {
		have = cfg.Duplicates.String()
	}
	return fmt.Sprintf("stream %s keeps message ids for %s, not %s: the server's memory for them grows with the window (docs/operations.md, \"The duplicate window\"); to set it: nats stream edit %s --dupe-window %s",
		cfg.Name, have, DuplicateWindow, cfg.Name, DuplicateWindow)
}

// RecordMarkersAdvice returns, for a room stream without record markers
// (one made before v0.3.0: EnsureStream never updates a stream), what an
// operator can run to turn them on once every serve and reader is at this
// release; "" when cfg has them (docs/operations.md, "Record markers").
func RecordMarkersAdvice(cfg jetstream.StreamConfig) string {
	if RecordMarkers(cfg) {
		return ""
	}
	return fmt.Sprintf("stream %s has no record markers: serve keeps the record rules of each room in memory, read whole from the stream (docs/operations.md, \"Record markers\"); once every serve and reader is at this release: %s, then restart the serves",
		cfg.Name, MetadataEdit(cfg))
}

// MetadataEdit returns the nats CLI command that turns on every roompub
// setting cfg's stream lacks (record markers, the attestations' compact
// form), once every serve and reader is at this release: `nats stream
// edit` replaces the stream's whole metadata, so the command names every
// key the stream keeps too (but the server's own, "_nats." ones), sorted.
// Both settings have that one condition, so one command turns on both.
func MetadataEdit(cfg jetstream.StreamConfig) string {
	md := make(map[string]string, len(cfg.Metadata)+2)
	for k, v := range cfg.Metadata {
		if !strings.HasPrefix(k, "_nats.") {
			md[k] = v
		}
	}
	md[MetadataRecordMarkers], md[MetadataAttestation] = MarkersV1, AttestationCompact
	keys := slices.Sorted(maps.Keys(md))
	var b strings.Builder
	b.WriteString("nats stream edit " + shellWord(cfg.Name))
	for _, k := range keys {
		b.WriteString(" --metadata " + shellWord(k+"="+md[k]))
	}
	return b.String()
}

// shellWord is w as one word of a POSIX shell command line: as it is
// when it holds only characters no shell treats specially, else in
// single quotes.
func shellWord(w string) string {
	safe := w != "" && strings.IndexFunc(w, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("._/:=,@+-", r))
	}) < 0
	if safe {
		return w
	}
	return "'" + strings.ReplaceAll(w, "'", `'\''`) + "'"
}

// CompactAttestationsAdvice returns, for a room stream without the
// attestations' compact form (one made before it: EnsureStream never
// updates a stream), what an operator can run to turn it on once every
// serve and reader is at this release; "" when cfg has it
// (docs/operations.md, "The attestation's compact form").
func CompactAttestationsAdvice(cfg jetstream.StreamConfig) string {
	if CompactAttestations(cfg) {
		return ""
	}
	return fmt.Sprintf("stream %s has no compact attestations: the gate writes the batch's signature on every message, about 90 bytes each (docs/operations.md, \"The attestation's compact form\"); once every serve and reader is at this release: %s, then restart the serves",
		cfg.Name, MetadataEdit(cfg))
}

// DefaultTimeout bounds a server call when the caller's context has no
// deadline (the nats.go jetstream convention).
const DefaultTimeout = 5 * time.Second
