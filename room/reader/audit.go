package reader

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/roompub/roompub/checkpoint"
	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/internal/jsapi"
	"github.com/roompub/roompub/validate"
)

// AuditOptions configures Audit; the zero value of each field is its
// default, except Validator, which is required.
type AuditOptions struct {
	Stream   string        // default DefaultStream
	Subjects room.Subjects // default prefix "rooms"
	// Rooms limits the audit to these room ids; empty audits every room.
	Rooms []string
	// FromSeq or Since start the replay mid-stream; chains first seen
	// there are anchored at their first entry (their start is unchecked).
	FromSeq uint64
	Since   time.Time
	// Validator verifies every message; it should check host trust.
	Validator *validate.Validator
	// Progress, when set, is called every ProgressEvery messages and at
	// the end with the messages read and the stream's last sequence.
	Progress      func(read, last uint64)
	ProgressEvery uint64
	// MaxViolations bounds the violations kept in the report (default
	// 10,000); Omitted counts the rest. Totals count them all.
	MaxViolations int
	// OnEvent, when set, receives every verified event (the evidence
	// command uses it). It must not keep Entry or Record past the call
	// unless it needs them.
	OnEvent func(*Event)

	// Trust, when it holds a key, checks the publishers' attestations and
	// checkpoints (checkpoint_mismatch): only messages attested by these
	// publishers are admitted, and every checkpoint must cover the room as
	// read. A replay from FromSeq or Since cannot check them (a room's tree
	// starts at its first message); the report says so.
	Trust *checkpoint.Trust
	// State, when set (with Trust), holds the last checkpoint verified per
	// room: each audited room's newest checkpoint must be consistent with
	// it (else the room is rolled back or forked), and the audit stores
	// its own newest verified checkpoints there. Without Rooms, every room
	// of the state is audited for this.
	State *CheckpointState
	// External are checkpoints obtained elsewhere (audit --checkpoint):
	// each must verify under Trust and be consistent with its room as
	// read. They need Trust and a full replay.
	External []ExternalCheckpoint

	// Witnessing, when set (with Trust naming the deployment origin and a
	// replay from the start), checks the deployment log: a witness
	// policy's quorum (witness_quorum) and every room checkpoint it holds
	// against the room as read (docs/witnesses.md).
	Witnessing *Witnessing

	// Read chooses how the stream is read: ReadAuto (the default), an
	// ordered consumer, falling back to direct gets when the stream's
	// consumer limit is reached or from a message the consumer stalls on
	// (replayStall); ReadConsumer; or ReadDirect, which creates no
	// consumer. AuditReport.ReadBy says which was used.
	Read ReadMode
}

// auditTuning is what callers inside the package (Prove) and tests (from
// export_test.go) set beyond AuditOptions.
type auditTuning struct {
	// fullTrees keeps every node of the rooms' trees (Prove).
	fullTrees bool
	// leaves bounds the leaves of the rooms' lean trees held in memory
	// (zero: checkpoint's defaults).
	leaves checkpoint.LeafBounds
	// direct tunes a direct read.
	direct directRead
	// ofPartition, in an audit of one partition of several
	// (AuditDeployment), says which rooms are on it: the checkpoint state's,
	// external checkpoints' and deployment log's rooms that are not belong
	// to another partition's audit. Nil: every room.
	ofPartition func(roomID string) bool
	// aside, when set, receives every message set aside, as read (Prove
	// and Export name the message asked for that is set aside).
	aside func(*prepared, *SetAside)
	// quietDeployment leaves the deployment log's own problems (no log, no
	// quorum, an entry that is no checkpoint) to another partition's
	// audit, which reports them once.
	quietDeployment bool
}

// ExternalCheckpoint is a signed checkpoint note from outside the stream.
type ExternalCheckpoint struct {
	Name string // where it came from (a file name), for reasons
	Note []byte
}

// ErrExternalCheckpoint is wrapped by the error of
// ExternalCheckpoint.Check, and of Audit for options whose External holds
// a checkpoint that fails it.
var ErrExternalCheckpoint = errors.New("not a usable checkpoint from elsewhere")

// Check checks what can be known of a checkpoint from elsewhere before
// the stream is read: a signed checkpoint note (checkpoint.Parse) that a
// key of t signed, of one of rooms when rooms is not empty. What fails is
// the caller's input, not the stream's: the error wraps
// ErrExternalCheckpoint and names e.Name and why. Whether the note is
// consistent with its room as read is the audit's to say
// (checkpoint_mismatch), since only that is evidence against the stream
// (docs/checkpoints.md, "The readers").
func (e ExternalCheckpoint) Check(t *checkpoint.Trust, rooms []string) error {
	u, err := checkpoint.ParseUnverified(e.Note)
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrExternalCheckpoint, e.Name, err)
	}
	if t.Len() == 0 {
		return fmt.Errorf("%w: %s: no trusted publisher keys to verify it with", ErrExternalCheckpoint, e.Name)
	}
	if _, err := checkpoint.Parse(e.Note, u.Room, t); err != nil {
		return fmt.Errorf("%w: %s (size %d, room %s): %w", ErrExternalCheckpoint, e.Name, u.Size, u.Room, err)
	}
	if len(rooms) > 0 && !slices.Contains(rooms, u.Room) {
		return fmt.Errorf("%w: %s (size %d): its room %s is not among the rooms audited (%s)", ErrExternalCheckpoint, e.Name, u.Size, u.Room, strings.Join(rooms, ", "))
	}
	return nil
}

// AttestationFacts says whether an audit checked the publishers' attestations
// and checkpoints, and with which keys.
type AttestationFacts struct {
	Checked bool `json:"checked"`
	// Why it was not checked.
	Why               string   `json:"why,omitempty"`
	TrustedPublishers []string `json:"trusted_publishers,omitempty"`
	// StateIgnored counts the checkpoints of the state directory
	// (AuditOptions.State) not held against the stream: signed by a key
	// the trust does not hold, or of another deployment origin than the
	// one it pins. Another trust verified them (another deployment's
	// reader sharing the directory); their files are left as they are.
	StateIgnored int `json:"state_ignored,omitempty"`
	// StateIgnoredRooms names the rooms of StateIgnored, sorted: this
	// audit holds no kept checkpoint of theirs, so a rollback of them
	// since is not found against one.
	StateIgnoredRooms []string `json:"state_ignored_rooms,omitempty"`
}

// AuditReport is the verdict of one replay.
type AuditReport struct {
	Stream  string `json:"stream"`
	FromSeq uint64 `json:"from_seq"`
	LastSeq uint64 `json:"last_seq"`
	// StreamProblems are the ways the stream is not append-only (code
	// weak_stream), including messages deleted from it.
	StreamProblems []string       `json:"stream_problems,omitempty"`
	Chains         []ChainSummary `json:"chains"`
	Records        map[string]int `json:"records"` // verified execution records per room
	Violations     []SetAside     `json:"violations"`
	Omitted        int            `json:"violations_omitted,omitempty"`
	Totals         AuditTotals    `json:"totals"`
	// Attestation says whether attestations and checkpoints were checked;
	// Checkpoints is then what was verified per room, sorted by room.
	Attestation AttestationFacts  `json:"attestation"`
	Checkpoints []RoomCheckpoints `json:"checkpoints,omitempty"`
	// Witness is what was verified of the deployment log (with
	// AuditOptions.Witnessing).
	Witness *WitnessFacts `json:"witness,omitempty"`
	// ReadBy is how the stream was read, ReadByConsumer or ReadByDirect
	// (empty when there was nothing to read), and ReadWhy why the direct
	// read was used.
	ReadBy  string `json:"read_by,omitempty"`
	ReadWhy string `json:"read_why,omitempty"`

	// RoomMessages counts the messages read per room, by the room token of
	// their subject (a message whose subject names no room counts in
	// none); every room of AuditOptions.Rooms is there, 0 when none of its
	// messages was read.
	RoomMessages map[string]uint64 `json:"room_messages"`
	// Notices are the loss notices read, in stream order: what operators
	// acknowledged the store lost (docs/reliability.md, "Loss notices").
	// They explain a damaged room; they do not make it clean.
	Notices []Notice `json:"notices,omitempty"`
	// Empty says the audit read nothing of what it was asked to audit: no
	// message at all, or none of a room named in AuditOptions.Rooms
	// (EmptyRooms, in the order given). Clean says nothing was found
	// wrong, which an empty audit also is; a verdict that something was
	// verified needs Clean and not Empty (a typo in a room id reads
	// nothing).
	Empty      bool     `json:"empty"`
	EmptyRooms []string `json:"empty_rooms,omitempty"`
	// Partitions, in an audit of a deployment of several partitions
	// (AuditDeployment), is what was read of each room stream; empty
	// otherwise.
	Partitions []PartitionSpan `json:"partitions,omitempty"`
	// chainParts is, in a joined report before it is sorted, the
	// partition each of Chains was read from.
	chainParts []int
}

// AuditTotals counts what the audit read.
type AuditTotals struct {
	Messages      uint64              `json:"messages"`
	Entries       uint64              `json:"entries"`
	Records       uint64              `json:"records"`
	SetAside      uint64              `json:"set_aside"`
	ByCode        map[events.Code]int `json:"by_code,omitempty"`
	ChainsOK      int                 `json:"chains_ok"`
	ChainsBroken  int                 `json:"chains_broken"`
	StreamIsSound bool                `json:"stream_append_only"`
	// Checkpoints counts the checkpoint messages not set aside (verified
	// when attestation is checked, otherwise not looked at).
	Checkpoints uint64 `json:"checkpoints,omitempty"`
	// Markers counts the record markers read and skipped: no leaves, the
	// record rules are judged on the records (docs/design.md, "Record
	// markers").
	Markers uint64 `json:"markers,omitempty"`
}

// Clean reports whether the audit found nothing wrong: no message set
// aside, no chain broken, no stream problem. An audit that read nothing
// is clean; Empty says so.
func (r *AuditReport) Clean() bool {
	return r.Totals.SetAside == 0 && len(r.StreamProblems) == 0 && r.Totals.ChainsBroken == 0
}

// Audit replays the room stream (every room, or opts.Rooms) from the start
// or the given point up to the last message at the time it starts, with an
// ordered consumer or direct gets (o.Read), verifies every message with a
// Reader, and reports per chain the entries, head and verdict, every
// violation with its code and stream sequence, and totals. The stateless
// part of verification (parse, entry rules, hashes, record signatures) runs
// on GOMAXPROCS goroutines; chain links and room rules are decided in stream
// order, so the verdicts are those of Reader.Verify on each message in turn.
// Memory is per chain and per record, plus a bounded window of messages in
// flight (about 1,000 pulled and 1,000 being verified), not per journal
// entry. With trusted publishers (o.Trust) it also checks the publishers'
// attestations and checkpoints (see attested.go: signatures are verified,
// one per atomic batch, only where no checkpoint covers a message), keeping
// each room's Merkle tree past its latest checkpoint within bounds
// (checkpoint.LeafBounds: the older leaves go to a temporary file; a full
// tree, about 64 bytes per admitted message, for checkpoints from
// elsewhere and witnessing) and up to maxDeferred verdicts that wait for
// a checkpoint. An error says so when spilled leaves cannot be read back.
func Audit(ctx context.Context, js jetstream.JetStream, o AuditOptions) (*AuditReport, error) {
	rep, _, err := audit(ctx, js, o, auditTuning{})
	return rep, err
}

// audit is Audit tuned by tune, returning its reader too (Prove reads its
// trees).
func audit(ctx context.Context, js jetstream.JetStream, o AuditOptions, tune auditTuning) (*AuditReport, *Reader, error) {
	if o.Validator == nil {
		return nil, nil, fmt.Errorf("%w: audit needs a validator", ErrReader)
	}
	o.Rooms = uniqueRooms(o.Rooms)
	partial := o.FromSeq > 1 || !o.Since.IsZero()
	if len(o.External) > 0 && (o.Trust.Len() == 0 || partial) {
		return nil, nil, fmt.Errorf("%w: a checkpoint from elsewhere needs trusted publishers and a replay from the start", ErrReader)
	}
	if tune.ofPartition == nil { // AuditDeployment checked them against every room asked for
		for _, e := range o.External {
			if err := e.Check(o.Trust, o.Rooms); err != nil {
				return nil, nil, err
			}
		}
	}
	if o.Witnessing != nil && (o.Trust.Len() == 0 || o.Trust.Origin() == "" || partial || o.Witnessing.Policy == nil) {
		return nil, nil, fmt.Errorf("%w: a witness policy needs trusted publishers, the deployment origin and a replay from the start", ErrReader)
	}
	name := o.Stream
	if name == "" {
		name = room.DefaultStream
	}
	if o.MaxViolations <= 0 {
		o.MaxViolations = 10000
	}
	if o.ProgressEvery == 0 {
		o.ProgressEvery = 10000
	}
	cctx, cancel := jsapi.WithDefaultTimeout(ctx, room.DefaultTimeout)
	st, err := js.Stream(cctx, name)
	var info *jetstream.StreamInfo
	if err == nil {
		info, err = st.Info(cctx)
	}
	cancel()
	if err != nil {
		return nil, nil, fmt.Errorf("stream %s: %w", name, err)
	}
	rep := &AuditReport{Stream: name, FromSeq: max(o.FromSeq, 1), LastSeq: info.State.LastSeq, Records: map[string]int{},
		Totals: AuditTotals{ByCode: map[events.Code]int{}}, RoomMessages: map[string]uint64{}}
	for _, id := range o.Rooms {
		rep.RoomMessages[id] = 0
	}
	counts := roomCounter{subjects: o.Subjects, counts: rep.RoomMessages}
	if err := room.CheckStreamConfig(info.Config, o.Subjects); err != nil {
		for _, e := range unjoin(err) {
			rep.StreamProblems = append(rep.StreamProblems, e.Error())
		}
	}
	if st := info.State; st.NumDeleted > 0 || (st.Msgs > 0 && st.FirstSeq != 1) {
		var gone []string
		if st.FirstSeq > 1 {
			gone = append(gone, fmt.Sprintf("the first %d messages are gone (the stream starts at seq %d)", st.FirstSeq-1, st.FirstSeq))
		}
		if st.NumDeleted > 0 {
			gone = append(gone, fmt.Sprintf("%d message(s) deleted between stream seqs %d and %d", st.NumDeleted, st.FirstSeq, st.LastSeq))
		}
		rep.StreamProblems = append(rep.StreamProblems, fmt.Sprintf("%v: %s", room.ErrStreamConfig, strings.Join(gone, "; ")))
	}
	rep.Totals.StreamIsSound = len(rep.StreamProblems) == 0

	r := NewReader(o.Validator, o.Subjects)
	r.evidence = nil // the report counts records; OnEvent callers keep what they need
	r.Anchor = partial
	if len(o.Rooms) > 0 {
		r.chainHome = chainHomes(ctx, js.Conn(), name, o.Subjects, room.DefaultTimeout)
	}
	r.leafBounds = tune.leaves
	r.onAside = tune.aside
	defer r.closeLedgers()
	switch {
	case o.Trust.Len() == 0:
		rep.Attestation.Why = "no trusted publisher keys (--trusted-publisher)"
	case partial:
		rep.Attestation.Why = "a replay from a point (--from-seq, --since): a room's tree starts at its first message"
	default:
		r.trustPublishers(o.Trust)
		// A checkpoint from elsewhere may be older than the ones read:
		// its root and proof need the whole tree.
		r.fullTrees = tune.fullTrees || len(o.External) > 0 || o.Witnessing != nil
		rep.Attestation = AttestationFacts{Checked: true, TrustedPublishers: o.Trust.NodeIDs()}
		if rep.Attestation.StateIgnoredRooms, err = loadFloors(r, o.State, o.Rooms, tune.ofPartition); err != nil {
			return nil, nil, err
		}
		rep.Attestation.StateIgnored = len(rep.Attestation.StateIgnoredRooms)
	}
	full := o.OnEvent != nil
	out := func(ev *Event, aside *SetAside) {
		switch {
		case aside != nil:
			rep.Totals.SetAside++
			rep.Totals.ByCode[aside.Code]++
			if len(rep.Violations) < o.MaxViolations {
				rep.Violations = append(rep.Violations, *aside)
			} else {
				rep.Omitted++
			}
		case ev == nil:
			rep.Totals.Checkpoints++
		case ev.Kind == room.KindJournal:
			rep.Totals.Entries++
		default:
			rep.Totals.Records++
			rep.Records[ev.RoomID]++
		}
		if ev != nil && o.OnEvent != nil {
			o.OnEvent(ev)
		}
	}
	markers := r.markers
	// A whole-stream audit gets every message the server counts; one it
	// does not get is one the server can no longer read (a damaged block
	// whose state file was kept: nothing else shows it).
	unread := jsapi.NewUnread(info.State.FirstSeq, info.State.LastSeq)
	whole := len(o.Rooms) == 0 && !partial && info.State.NumDeleted == 0
	if info.State.Msgs > 0 && info.State.LastSeq >= rep.FromSeq {
		var facts readFacts
		produce := func(ctx context.Context, emit func(*batch) bool) error {
			return replayWith(ctx, js, st, o.Read, tune.direct, o.Subjects, o.Rooms, o.FromSeq, o.Since, info.State.LastSeq, emit, &facts)
		}
		err := runOrdered(ctx, r, produce, func(b *batch) error {
			for i := range b.xs {
				x := &b.xs[i]
				rep.Totals.Messages++
				if whole {
					unread.Saw(x.m.Seq, nil)
				}
				counts.add(x)
				r.feed(x, full, out)
				if o.Progress != nil && rep.Totals.Messages%o.ProgressEvery == 0 {
					o.Progress(x.m.Seq, info.State.LastSeq)
				}
			}
			return nil
		})
		rep.ReadBy, rep.ReadWhy = facts.by, facts.why
		if err != nil {
			return rep, r, err
		}
		if whole && rep.Totals.Messages < info.State.Msgs {
			unread.End(nil)
			rep.StreamProblems = append(rep.StreamProblems, fmt.Sprintf("%v: the server counts %d messages in stream seqs %d to %d, and the read got %d: %s could not be read (a damaged block whose state file the server kept)",
				room.ErrStoreLost, info.State.Msgs, info.State.FirstSeq, info.State.LastSeq, rep.Totals.Messages, unreadString(unread)))
			rep.Totals.StreamIsSound = false
		}
	}
	r.finish(full, out)
	if err := r.leafErr(); err != nil {
		return rep, r, err
	}
	// A marker is handed out as a checkpoint is, with neither an event
	// nor a set-aside: the reader counted them apart.
	rep.Totals.Markers = r.markers - markers
	rep.Totals.Checkpoints -= rep.Totals.Markers
	if o.Progress != nil {
		o.Progress(info.State.LastSeq, info.State.LastSeq)
	}
	if r.trust != nil {
		if err := auditCheckpoints(ctx, js, r, o, tune, rep, out); err != nil {
			return rep, r, err
		}
	}
	rep.Chains = r.Chains()
	sortChains(rep.Chains)
	for _, c := range rep.Chains {
		if c.Verdict == "ok" {
			rep.Totals.ChainsOK++
		} else {
			rep.Totals.ChainsBroken++
		}
	}
	for _, id := range o.Rooms {
		if rep.RoomMessages[id] == 0 {
			rep.EmptyRooms = append(rep.EmptyRooms, id)
		}
	}
	rep.Empty = rep.Totals.Messages == 0 || len(rep.EmptyRooms) > 0
	return rep, r, nil
}

// sortChains sorts an audit's chains by room, run and capsule.
func sortChains(cs []ChainSummary) {
	sort.Slice(cs, func(i, j int) bool {
		a, b := cs[i], cs[j]
		if a.RoomID != b.RoomID {
			return a.RoomID < b.RoomID
		}
		if a.Chain.RunID != b.Chain.RunID {
			return a.Chain.RunID < b.Chain.RunID
		}
		return a.Chain.CapsuleID < b.Chain.CapsuleID
	})
}

// roomCounter counts an audit's messages per room (AuditReport.RoomMessages).
type roomCounter struct {
	subjects room.Subjects
	counts   map[string]uint64
}

// add counts x under its room: the subject's room when it parsed, else
// the room its second token names (a subject under a room's filter with
// no known layout is still that room's message), else none.
func (c roomCounter) add(x *prepared) {
	id := x.p.RoomID
	if x.subjErr != nil {
		id = roomOfSubject(c.subjects, x.m.Subject)
	}
	if id != "" {
		c.counts[id]++
	}
}

// roomOfSubject returns the room whose token subject's second token is,
// or "" when it is under no room of subjects.
func roomOfSubject(subjects room.Subjects, subject string) string {
	prefix, rest, ok := strings.Cut(subject, ".")
	if !ok || prefix != subjects.Root() {
		return ""
	}
	tok, _, ok := strings.Cut(rest, ".")
	if !ok {
		return ""
	}
	id, err := room.DecodeToken(tok)
	if err != nil {
		return ""
	}
	return room.RoomIDPrefix + id
}

// loadFloors gives each room's ledger the checkpoint state holds for it
// (rooms, or every room of state) when r's trust would have verified it,
// and returns the rooms whose checkpoint it ignored (foreignKept), sorted:
// those rooms are in r.keptIgnored, whose state is not written.
func loadFloors(r *Reader, state *CheckpointState, rooms []string, of func(string) bool) ([]string, error) {
	if state == nil {
		return nil, nil
	}
	if len(rooms) == 0 {
		var err error
		if rooms, err = state.Rooms(); err != nil {
			return nil, err
		}
	}
	var ignored []string
	for _, id := range rooms {
		if of != nil && !of(id) {
			continue
		}
		c, err := state.Load(id)
		if err != nil {
			return nil, err
		}
		switch {
		case c == nil:
		case foreignKept(c, r.trust):
			if r.keptIgnored == nil {
				r.keptIgnored = map[string]bool{}
			}
			if !r.keptIgnored[id] {
				ignored = append(ignored, id)
			}
			r.keptIgnored[id] = true
		default:
			r.ledgerOf(id).Keep(c)
		}
	}
	slices.Sort(ignored)
	return ignored, nil
}

// foreignKept reports whether t would not have verified the kept
// checkpoint c: signed by a key t does not trust, or in the origin form
// of another deployment than the one t pins (checkpoint.Parse's rules).
// Another reader's trust put it in a shared state directory (another
// deployment's), so it says nothing of this stream. A key rotation keeps
// the old key trusted (docs/checkpoints.md, "Keys and rotation"), so its
// checkpoints still hold.
func foreignKept(c *checkpoint.Checkpoint, t *checkpoint.Trust) bool {
	if !t.Trusts(c.Signer) {
		return true
	}
	_, d, ok := checkpoint.RoomOfOrigin(c.Origin)
	return ok && t.Origin() != "" && d != t.Origin()
}

// auditCheckpoints ends a trusting audit: rooms whose newest checkpoint
// is smaller than the one verified before (rolled back), the checkpoints
// from elsewhere, the per-room facts, and the state saved.
func auditCheckpoints(ctx context.Context, js jetstream.JetStream, r *Reader, o AuditOptions, tune auditTuning, rep *AuditReport, out func(*Event, *SetAside)) error {
	ids := r.ledgerRooms()
	for _, id := range ids {
		l := r.ledgers[id]
		if why := l.rolledBack(); why != "" {
			l.refused = why
			_, seq := l.Latest()
			out(nil, roomAside(o.Subjects, id, seq, why))
		}
	}
	for _, e := range o.External {
		if u, err := checkpoint.ParseUnverified(e.Note); err == nil && tune.ofPartition != nil && !tune.ofPartition(u.Room) {
			continue
		} else if err != nil && tune.quietDeployment {
			continue // refused once, by the first partition's audit
		}
		if a := r.checkExternal(o.Subjects, o.Rooms, e); a != nil {
			out(nil, a)
		}
	}
	var witnessed map[string]*RoomWitness
	if o.Witnessing != nil {
		var err error
		if witnessed, err = checkWitnessed(ctx, js, r, o, tune, rep, out); err != nil {
			return err
		}
	}
	for _, id := range r.ledgerRooms() {
		f := r.ledgers[id].facts()
		f.Witnessed = witnessed[id]
		rep.Checkpoints = append(rep.Checkpoints, f)
	}
	rep.Notices = r.Notices()
	if o.State == nil {
		return nil
	}
	for _, id := range ids {
		l := r.ledgers[id]
		latest, _ := l.Latest()
		kept, _ := l.Kept()
		if latest != nil && l.refused == "" && !r.keptIgnored[id] && (kept == nil || latest.Size > kept.Size) {
			if err := o.State.Save(latest); err != nil {
				return fmt.Errorf("checkpoint state: %w", err)
			}
		}
	}
	return nil
}

func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// filters returns the subject filters for rooms (every room when empty).
func filters(subjects room.Subjects, rooms []string) []string {
	if len(rooms) == 0 {
		return []string{subjects.All()}
	}
	out := make([]string, len(rooms))
	for i, id := range rooms {
		out[i] = subjects.Room(id)
	}
	return out
}

// uniqueRooms returns rooms with each room once, in the order first
// given: a reader reads a room once, and the server refuses a consumer
// whose filters overlap.
func uniqueRooms(rooms []string) []string {
	var out []string
	for _, id := range rooms {
		if !slices.Contains(out, id) {
			out = append(out, id)
		}
	}
	return out
}

// A replay's ordered consumer pulls up to pullMaxMessages messages at a
// time, and at most pullMaxBytes (raised to twice the server's max
// payload, so one message always fits) in one pull: big pulls, one
// request for many messages, and a bound on what the client buffers.
const (
	pullMaxMessages = 1024
	pullMaxBytes    = 4 << 20
)

// replayIdle is how long a replay waits for a message before it asks the
// consumer whether any is left; replayRecreate is how many times in a row
// it lets the answer be that the consumer is being created again before
// it gives up (about 30 s); replayStall is how many checks in a row it
// lets the consumer deliver nothing, be created anew since the check
// before and say messages are left before it gives up on it (about
// 10 s): a stored message whose header
// reads as a status (a block of bare LFs keeps its status line) is taken
// by nats.go's consumer for the server's, which resets the ordered
// consumer onto the same message again and again, so nothing past it
// ever comes.
const (
	replayIdle     = 2 * time.Second
	replayRecreate = 15
	replayStall    = 5
)

// stallError ends a replay whose ordered consumer made no progress past
// stream seq At (replayStall); ReadAuto reads on from At by direct gets.
type stallError struct {
	At  uint64
	For time.Duration // how long nothing came
}

func (e *stallError) Error() string {
	return fmt.Sprintf("the ordered consumer delivered nothing past stream seq %d for %s while the server counts messages left: "+
		"a stored message there may read to the client as a status (docs/design.md, \"Where a direct get says a message is stored\"); read with direct gets (subscriber --read direct)",
		e.At-1, e.For)
}

// replay emits, in batches, the messages on the rooms' subjects in stream
// order, from fromSeq (or since) up to last inclusive, read with an
// ordered consumer; idleAfter is replayIdle (a test's shorter). It
// returns once the message at last (or the last one on these subjects)
// is emitted, on an error (a *stallError when the consumer is stuck),
// or with ctx's error once emit refuses a batch.
func replay(ctx context.Context, nc *nats.Conn, st jetstream.Stream, idleAfter time.Duration, maxPayload int, subjects room.Subjects, rooms []string, fromSeq uint64, since time.Time, last uint64, emit func(*batch) bool) error {
	stream := st.CachedInfo().Config.Name
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: filters(subjects, rooms), DeliverPolicy: jetstream.DeliverAllPolicy}
	start, err := replayStart(ctx, nc, stream, subjects, fromSeq, since)
	if err != nil || start > last {
		return err
	}
	if start > 1 {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, start
	}
	cons, err := st.OrderedConsumer(ctx, cfg)
	if err != nil {
		return fmt.Errorf("replay: %w", err)
	}
	// The handler runs on the consumer's delivery goroutine; mu guards the
	// batch it fills and the end, which the idle check below may also
	// reach.
	var (
		mu       sync.Mutex
		b        = newBatch()
		handled  = start - 1 // stream seq of the last message added
		finished bool
		seen     atomic.Uint64 // messages delivered, for the idle check
		done     = make(chan error, 1)
		endCheck = make(chan struct{}, 1) // the handler saw nothing pending
	)
	// finish ends the replay once, with mu held.
	finish := func(err error) {
		if !finished {
			finished = true
			done <- err
		}
	}
	// flush hands on the batch, with mu held.
	flush := func() bool {
		if len(b.xs) == 0 {
			return true
		}
		ok := emit(b)
		b = newBatch()
		return ok
	}
	cc, err := cons.Consume(func(msg jetstream.Msg) {
		seen.Add(1)
		mu.Lock()
		defer mu.Unlock()
		if finished {
			return
		}
		meta, err := msg.Metadata()
		if err != nil {
			finish(fmt.Errorf("replay: %w", err))
			return
		}
		seq := meta.Sequence.Stream
		if seq > last {
			// Appended after the replay started (on a room's subject,
			// where the last sequence read is below last).
			if !flush() {
				finish(ctx.Err())
				return
			}
			finish(nil)
			return
		}
		handled = seq
		b.add(StreamMsg{Subject: msg.Subject(), Seq: seq, Data: msg.Data(), Time: meta.Timestamp, Attestation: checkpoint.AttestationOf(msg.Headers()), Owner: msg.Headers().Get(room.HeaderOwner)}, nil)
		if seq == last || meta.NumPending == 0 || len(b.xs) >= batchMsgs || b.size >= batchBytes {
			if !flush() {
				finish(ctx.Err())
				return
			}
			switch {
			case seq == last:
				finish(nil)
			case meta.NumPending == 0:
				// The end of these subjects, unless the consumer sits on
				// a lagging replica: the loop below asks the leader.
				select {
				case endCheck <- struct{}{}:
				default:
				}
			}
		}
	}, jetstream.PullMaxMessagesWithBytesLimit(pullMaxMessages, max(pullMaxBytes, 2*maxPayload)))
	if err != nil {
		return fmt.Errorf("replay: %w", err)
	}
	defer func() {
		cc.Stop()
		// A stopped ordered consumer stays on the server for its inactive
		// threshold (nats.go sets 5 minutes), and the server matches
		// every new message against it: a reader that replays a room
		// every second would leave hundreds behind. Deleting it is not
		// an error when it fails (the threshold still ends it).
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), leaderGetTimeout)
		_ = st.DeleteConsumer(dctx, cons.CachedInfo().Name)
		cancel()
	}()
	idle := time.NewTicker(idleAfter)
	defer idle.Stop()
	before, recreating, stalled := uint64(0), 0, 0
	named := "" // the consumer's name at the last check: nats.go names each one it creates anew
	// atEnd reports whether nothing after handled up to last is left on
	// these subjects as the stream leader has them (see leaderHasMore).
	atEnd := func(handled uint64) bool {
		more, err := leaderHasMore(ctx, nc, stream, cfg.FilterSubjects, handled, last)
		if err != nil {
			mu.Lock()
			finish(fmt.Errorf("replay: %w", err))
			mu.Unlock()
			return false
		}
		return !more
	}
	for {
		select {
		case err := <-done:
			return err
		case <-ctx.Done():
			mu.Lock()
			finish(ctx.Err())
			mu.Unlock()
		case <-endCheck:
			mu.Lock()
			h := handled
			mu.Unlock()
			if atEnd(h) {
				mu.Lock()
				if handled == h {
					finish(nil) // the batch up to h was flushed by the handler
				}
				mu.Unlock()
			}
		case <-idle.C:
			// Nothing for a while: either the end of these subjects or a
			// slow server. Ask the consumer which, rather than stop short.
			if now := seen.Load(); now != before {
				before, stalled = now, 0
				continue
			}
			ci, err := cons.Info(ctx)
			reset := false // created anew since the last check, nothing delivered
			if err == nil {
				recreating = 0
				reset = named != "" && ci.Name != named
				named = ci.Name
			}
			mu.Lock()
			switch {
			case err == nil && (ci.NumPending > 0 || (ci.Delivered.Consumer > 0 && ci.Delivered.Stream > handled)):
				// Messages left, none delivered: a slow server, or a
				// consumer nats.go resets onto one message again and
				// again. Only the second renames it at every check; a
				// recovery (a missed heartbeat) renames it once, then
				// delivers.
				if !reset {
					stalled = 0
					break
				}
				if stalled++; stalled >= replayStall {
					if !flush() {
						finish(ctx.Err())
						break
					}
					finish(&stallError{At: handled + 1, For: time.Duration(replayStall) * idleAfter})
				}
			case (errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, jetstream.ErrOrderedConsumerNotCreated)) && recreating < replayRecreate:
				// The ordered consumer is being created again (after a
				// missed heartbeat, a reconnect, a leader change): ask
				// later, for a while.
				recreating++
			case err != nil:
				finish(fmt.Errorf("replay: %w", err))
			case ci.NumPending == 0 && (ci.Delivered.Consumer == 0 || ci.Delivered.Stream <= handled):
				// Nothing left on the consumer's replica and nothing
				// delivered that the handler has not taken: the end, once
				// the leader agrees (mu is released for its answer).
				if !flush() {
					finish(ctx.Err())
					break
				}
				h := handled
				mu.Unlock()
				end := atEnd(h)
				mu.Lock()
				if end && handled == h {
					finish(nil)
				}
			}
			mu.Unlock()
		}
	}
}

// unreadString is u's skipped seqs for the audit's stream problem:
// "stream seqs 7, 9 (2 messages)", with " …" past ten.
func unreadString(u jsapi.Unread) string {
	var b strings.Builder
	b.WriteString("stream seqs ")
	for i, s := range u.UnreadableSeqs {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(strconv.FormatUint(s, 10))
	}
	if u.Unreadable > uint64(len(u.UnreadableSeqs)) {
		b.WriteString(" …")
	}
	fmt.Fprintf(&b, " (%d messages)", u.Unreadable)
	return b.String()
}
