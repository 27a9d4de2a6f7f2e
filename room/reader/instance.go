package reader

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/roompub/roompub/checkpoint"
	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/internal/jsapi"
	"github.com/roompub/roompub/validate"
)

// InstanceOptions says whose records InstanceRecords reads, and where.
type InstanceOptions struct {
	Stream   string        // default room.DefaultStream
	Subjects room.Subjects // the stream's subjects
	// Room limits the read to one room; "" reads every room of the stream.
	Room string
	// Instance is the environment/ref whose records are read.
	Instance string
	// Validator checks each record's own rules, host trust included
	// (validate.WithTrustedHosts). Required.
	Validator *validate.Validator
	// Trust, when it holds keys, admits a record only with a valid
	// attestation by one of them, at the record's place on its subject;
	// without keys (nil or empty) nothing is checked, as in Audit.
	Trust *checkpoint.Trust
	// Timeout bounds each request; default room.DefaultTimeout.
	Timeout time.Duration

	markerPage int // instance markers read per request; default 1,000 (tests set fewer)
	// onGenuine, when set, is called once per marker whose record is read
	// and judged to decide the relation rules (tests count them).
	onGenuine func()
	// beforeList, when set, is called before the request for each page of
	// instance markers after the first, with the page's index (tests
	// append records while a read is under way).
	beforeList func(page int)
}

// InstanceReport is what InstanceRecords found: the verified records of
// the instance in the rooms whose records are marked, in stream order;
// the records its instance markers name that failed a rule (set aside,
// with the code); and the rooms whose records are not marked (written
// before markers, or on a stream without them), which only a read of the
// whole room can answer for.
type InstanceReport struct {
	Records  []VerifiedRecord `json:"records"`
	SetAside []SetAside       `json:"set_aside,omitempty"`
	Unmarked []string         `json:"unmarked_rooms,omitempty"`
}

// maxRecordBatch bounds the messages read with a record, from it: the
// gate stores at most its key, run and decision markers before its
// instance marker.
const maxRecordBatch = 8

// instanceWorkers is how many records InstanceRecords reads and judges at
// once: each read is a round trip of a few tens of microseconds on a
// quiet local server, far longer on a busy machine, where a worker
// waiting for its reply leaves the cores to the others (BenchmarkMarkedRoom
// at load 10, 2,000 records: 1.1 to 2.5 s with 64, 1.2 to 3.7 s with 16).
// Memory follows: one record and its markers each.
const instanceWorkers = 64

// InstanceRecords reads the records of one instance (environment/ref)
// through the room's instance markers (docs/design.md, "Record markers"),
// without reading the room: its requests follow the instance's records,
// not the room's (the server still loads each block that holds one).
// Each record a marker names is read by stream sequence and kept when it
// passes every rule of its own (the Validator's: schema, canonical form,
// signature, host trust, its evidence's instance), is the marker's room's
// record with the marker's digest and instance, is named by its room's
// key and run markers as their holder and follows no unknown outcome of
// its decision on the decision's markers, and, with Trust, has a valid
// attestation at its place on the subject. Records of rooms without
// markers are not read: their rooms are listed in Unmarked.
// Errors: the stream's (a request failed), never a record's.
func InstanceRecords(ctx context.Context, nc *nats.Conn, o InstanceOptions) (*InstanceReport, error) {
	if o.Validator == nil {
		return nil, errors.New("reader: InstanceRecords needs a validator")
	}
	if o.Stream == "" {
		o.Stream = room.DefaultStream
	}
	if o.Timeout <= 0 {
		o.Timeout = room.DefaultTimeout
	}
	if o.markerPage <= 0 {
		o.markerPage = 1000
	}
	out := &InstanceReport{}
	unmarked, err := unmarkedRooms(ctx, nc, o)
	if err != nil {
		return nil, err
	}
	out.Unmarked = unmarked
	g, err := jsapi.NewGetter(nc, o.Stream, o.Timeout)
	if err != nil {
		return nil, err
	}
	defer g.Close()
	type result struct {
		rec   *VerifiedRecord
		aside *SetAside
		err   error
	}
	type job struct {
		m jsapi.Msg
		r *result
	}
	decisions := newDecisionMarkers()
	var wg sync.WaitGroup
	jobs := make(chan job)
	for range instanceWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				j.r.rec, j.r.aside, j.r.err = instanceRecord(ctx, g, o, decisions, j.m)
			}
		}()
	}
	// Each page of markers goes to the workers before the next is listed:
	// its records are read while the server still holds the blocks the
	// listing loaded, where listing every marker first had it load the
	// room's every block twice (docs/performance.md, "Records in a room").
	var pages [][]result // one per page: workers hold pointers into them
	listErr := instanceMarkers(ctx, nc, o, func(page []jsapi.Msg) error {
		rs := make([]result, len(page))
		pages = append(pages, rs)
		for i := range page {
			select {
			case jobs <- job{page[i], &rs[i]}:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	})
	close(jobs)
	wg.Wait()
	if listErr != nil {
		return nil, listErr
	}
	// A record is judged once per marker that names it: a marker written
	// around the gate (another position, say) can fail where the gate's
	// verified it. A record one marker verified is served and not set
	// aside; one no marker verified is set aside once.
	all := slices.Concat(pages...)
	served, aside := map[uint64]bool{}, map[uint64]bool{}
	for _, r := range all {
		if r.err != nil {
			return nil, r.err
		}
		if r.rec != nil && !served[r.rec.StreamSeq] {
			served[r.rec.StreamSeq] = true
			out.Records = append(out.Records, *r.rec)
		}
	}
	for _, r := range all {
		if r.aside != nil && !served[r.aside.Seq] && !aside[r.aside.Seq] {
			aside[r.aside.Seq] = true
			out.SetAside = append(out.SetAside, *r.aside)
		}
	}
	sort.Slice(out.Records, func(i, j int) bool { return out.Records[i].StreamSeq < out.Records[j].StreamSeq })
	return out, nil
}

// unmarkedRooms lists the rooms (o.Room, or every room) that hold records
// and no format marker.
func unmarkedRooms(ctx context.Context, nc *nats.Conn, o InstanceOptions) ([]string, error) {
	tok := "*"
	if o.Room != "" {
		tok = room.RoomToken(o.Room)
	}
	root := o.Subjects.Root()
	count := func(filter string) (map[string]uint64, error) {
		return jsapi.SubjectCounts(ctx, nc, o.Stream, filter, o.Timeout)
	}
	execs, err := count(root + "." + tok + ".exec")
	if err != nil {
		return nil, err
	}
	formats, err := count(root + "." + tok + ".mark.format")
	if err != nil {
		return nil, err
	}
	var out []string
	for subj := range execs {
		p, err := o.Subjects.Parse(subj)
		if err != nil {
			continue
		}
		fsubj := o.Subjects.Marker(p.RoomID, room.MarkFormat, "")
		marked := false
		if formats[fsubj] > 0 {
			if marked, err = formatMarked(ctx, nc, o, subj, fsubj); err != nil {
				return nil, err
			}
		}
		if !marked {
			out = append(out, p.RoomID)
		}
	}
	sort.Strings(out)
	return out, nil
}

// formatMarked reports whether the format subject fsubj holds the room's
// format marker (room.FormatMarked, read by direct gets). Anything else
// there was written around the gate: a room stored before markers (whose
// records have none) must still be read whole, not through the instance
// markers it lacks.
func formatMarked(ctx context.Context, nc *nats.Conn, o InstanceOptions, execSubj, fsubj string) (bool, error) {
	return room.FormatMarked(func(seq uint64, subj string) (uint64, []byte, bool, error) {
		gctx, cancel := context.WithTimeout(ctx, o.Timeout)
		defer cancel()
		m, err := jsapi.DirectGet(gctx, nc, o.Stream, map[string]any{"seq": seq, "next_by_subj": subj})
		if err != nil || m == nil {
			return 0, nil, false, err
		}
		return m.Seq, m.Data, true, nil
	}, execSubj, fsubj)
}

// instanceMarkers reads the instance's markers, in stream order, in
// batches of direct gets of o.markerPage, and hands each batch to page
// before it reads the next; errors are the stream's or page's.
func instanceMarkers(ctx context.Context, nc *nats.Conn, o InstanceOptions, page func([]jsapi.Msg) error) error {
	filter := o.Subjects.InstanceMarkers(o.Room, o.Instance)
	for seq, n := uint64(1), 0; ; n++ {
		if o.beforeList != nil && n > 0 {
			o.beforeList(n)
		}
		ms, err := jsapi.DirectBatch(ctx, nc, o.Stream, jsapi.BatchRequest{Seq: seq, NextBySubj: filter, Batch: o.markerPage}, o.Timeout)
		if err != nil {
			return fmt.Errorf("read the instance markers of %s: %w", o.Instance, err)
		}
		if len(ms) > 0 {
			if err := page(ms); err != nil {
				return err
			}
		}
		if len(ms) == 0 || ms[len(ms)-1].Pending == 0 {
			return nil
		}
		seq = ms[len(ms)-1].Seq + 1
	}
}

// instanceRecord reads and judges the record instance marker m names: the
// record, or why it is set aside (nil, nil when m is no marker of a record
// at all), or the stream's error.
func instanceRecord(ctx context.Context, g *jsapi.Getter, o InstanceOptions, decisions *decisionMarkers, m jsapi.Msg) (*VerifiedRecord, *SetAside, error) {
	p, err := o.Subjects.Parse(m.Subject)
	if err != nil || p.Kind != room.KindMarker || p.Marker != room.MarkInstance {
		return nil, nil, nil
	}
	mk, err := room.ParseMarker(m.Data)
	seq := mk.RecordSeq(m.Seq)
	if err != nil || seq == 0 || mk.Position == nil {
		return nil, nil, nil // no record's marker: nothing it names is read
	}
	subj := o.Subjects.Records(p.RoomID)
	// The record and what follows it up to this marker (the gate stores
	// a record's markers after it at consecutive sequences, the key, run
	// and decision markers before the instance's): one request.
	batch, err := g.Batch(ctx, jsapi.BatchRequest{Seq: seq, Batch: int(min(mk.Offset, maxRecordBatch))})
	if err != nil {
		return nil, nil, err
	}
	var rm *jsapi.Msg
	if len(batch) > 0 && batch[0].Seq == seq {
		rm = &batch[0]
	}
	aside := func(problems []events.Problem) (*VerifiedRecord, *SetAside, error) {
		ref := events.NewRefusal(problems)
		return nil, &SetAside{RoomID: p.RoomID, Kind: room.KindExecution, Seq: seq, Subject: subj, Code: ref.Code, Reason: ref.Reason, Problems: ref.Problems}, nil
	}
	if rm == nil || rm.Subject != subj {
		return nil, nil, nil // the marker names no record of its room
	}
	rec, err := o.Validator.StoredRecord(rm.Data, events.Location{Seq: seq}, p.RoomID)
	var ref *events.Refusal
	switch {
	case rec == nil || !mk.Names(rec, room.MarkInstance, o.Instance):
		// Not the record the marker says (another's, another instance's,
		// or none that parses): the marker is no record's, and nothing of
		// another instance is set aside as this one's.
		return nil, nil, nil
	case errors.As(err, &ref):
		return aside(ref.Problems)
	case err != nil:
		return nil, nil, nil
	}
	if problems, err := heldBy(ctx, g, o, decisions, rec, mk.Record, seq, batch); err != nil || len(problems) > 0 {
		if err != nil {
			return nil, nil, err
		}
		return aside(problems)
	}
	if o.Trust.Len() > 0 {
		att := checkpoint.AttestationOf(rm.Header)
		if _, err := o.Trust.VerifyAttestation(att, p.RoomID, subj, checkpoint.RecordPosition(*mk.Position), checkpoint.ContentHash(rm.Data)); err != nil {
			return aside([]events.Problem{{Code: events.CheckpointMismatch, At: events.Location{Seq: seq}, Reason: "not admitted: " + err.Error()}})
		}
	}
	vr := verifiedRecord(p.RoomID, rec, seq)
	return &vr, nil, nil
}

// heldBy applies the relation rules to rec, stored at seq, on its room's
// markers (validate.RelationProblems), as the gate keeps them: the first
// genuine key and run markers must name rec, and no genuine marker of its
// decision before it may name a record with an unknown outcome. A marker
// is genuine when the record at its offset is the room's, passes its own
// rules, has the marker's digest and holds the marked value (a marker
// written around the gate names none). A record stored around the gate,
// with no markers, is not seen here; `subscriber audit` judges the room
// whole. digest is rec's content digest.
//
// Most records need no read for it: a marker of rec read with it (batch)
// that the server stored with an expected last subject sequence of 0 (a
// header it keeps, and checked when it stored the marker; the gate sets
// it on key and run markers, and on a decision's first) proves no marker
// was on its subject before (firstOnSubject). Otherwise the subject's
// markers are read in order: a key's or run's until the first genuine
// one; a decision's whole, once per InstanceRecords call for all the
// records of that decision it judges (decisions), since every record of a
// decision after its first reads the markers before its own, and a
// decision of n records would cost n²/2 reads and signature checks.
func heldBy(ctx context.Context, g *jsapi.Getter, o InstanceOptions, decisions *decisionMarkers, rec *events.Record, digest string, seq uint64, batch []jsapi.Msg) ([]events.Problem, error) {
	roomID := rec.RoomID()
	var held validate.Held
	for _, k := range []room.MarkerKind{room.MarkKey, room.MarkRun, room.MarkDecision} {
		v := room.MarkedValue(rec, k)
		if v == "" {
			continue // a record without a decision (every record has a key and a run)
		}
		subj := o.Subjects.Marker(roomID, k, v)
		if firstOnSubject(batch, subj, digest, seq) {
			continue
		}
		if k == room.MarkDecision {
			marks, err := decisions.read(ctx, g, o, roomID, v, subj, seq)
			if err != nil {
				return nil, err
			}
			held.Unknown = unknownBefore(marks, seq)
			continue
		}
		_, err := eachMarker(ctx, g, subj, 1, func(mk room.Marker, at uint64) (bool, error) {
			if at == seq {
				return true, nil // rec's own marker: nothing before it holds the value
			}
			h, _, err := genuine(ctx, g, o, roomID, k, v, mk, at)
			if err != nil || h == nil {
				return false, err
			}
			if k == room.MarkKey {
				held.Key = h
			} else {
				held.Run = h
			}
			return true, nil
		})
		if err != nil {
			return nil, err
		}
	}
	return validate.RelationProblems(rec, events.Location{Seq: seq}, held), nil
}

// decisionMarker is one marker of a decision's subject as heldBy judges
// it: the stream sequence of the record it names and, when that record is
// genuine (see genuine), its outcome.
type decisionMarker struct {
	at      uint64
	genuine bool
	outcome string
}

// unknownBefore returns the stream sequence of the first genuine record
// with an unknown outcome that marks (a decision's markers in stream
// order) name before the record at seq, or 0: marks are walked up to the
// first that names seq itself or a genuine record after it.
func unknownBefore(marks []decisionMarker, seq uint64) uint64 {
	for _, m := range marks {
		switch {
		case m.at == seq:
			return 0 // the record's own marker: nothing before it holds the decision
		case !m.genuine:
		case m.outcome == "unknown" && m.at < seq:
			return m.at
		case m.at > seq:
			return 0
		}
	}
	return 0
}

// decisionMarkers holds, for one InstanceRecords call, each decision
// subject's markers as judged, read by the first worker that needs them
// while the others wait. A record's own decision marker is stored before
// its instance marker, so a read that does not reach the record judged
// (no marker names it or a later record) was made before that record was
// stored, while the instance's markers were still being listed: the
// subject is then read on from where that read ended.
type decisionMarkers struct {
	mu   sync.Mutex
	subj map[string]*decisionRead
}

// decisionRead is one decision subject's read so far (mu): its markers in
// stream order, the largest record sequence they name, the stream
// sequence it goes on from, and the stream's error, which ends it.
type decisionRead struct {
	mu    sync.Mutex
	marks []decisionMarker
	reach uint64
	next  uint64
	err   error
}

func newDecisionMarkers() *decisionMarkers {
	return &decisionMarkers{subj: map[string]*decisionRead{}}
}

// read returns the markers of subj, the subject of decision value in
// roomID, in stream order, each judged (genuine), read at least up to the
// marker of the record at seq when the subject holds it; or the stream's
// error.
func (d *decisionMarkers) read(ctx context.Context, g *jsapi.Getter, o InstanceOptions, roomID, value, subj string, seq uint64) ([]decisionMarker, error) {
	d.mu.Lock()
	r, ok := d.subj[subj]
	if !ok {
		r = &decisionRead{next: 1}
		d.subj[subj] = r
	}
	d.mu.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err != nil || (ok && r.reach >= seq) {
		return r.marks, r.err
	}
	r.next, r.err = eachMarker(ctx, g, subj, r.next, func(mk room.Marker, at uint64) (bool, error) {
		h, outcome, err := genuine(ctx, g, o, roomID, room.MarkDecision, value, mk, at)
		r.marks = append(r.marks, decisionMarker{at: at, genuine: h != nil, outcome: outcome})
		r.reach = max(r.reach, at)
		return false, err
	})
	return r.marks, r.err
}

// eachMarker calls fn, in stream order, with each marker on subj from
// stream sequence from on that names a record (its body and that record's
// stream sequence), until fn says stop; it returns the stream sequence
// after the last message it read (from when none), and the stream's or
// fn's error.
func eachMarker(ctx context.Context, g *jsapi.Getter, subj string, from uint64, fn func(mk room.Marker, at uint64) (stop bool, err error)) (uint64, error) {
	for {
		m, err := g.NextBySubject(ctx, from, subj)
		if err != nil || m == nil {
			return from, err
		}
		from = m.Seq + 1
		mk, err := room.ParseMarker(m.Data)
		at := mk.RecordSeq(m.Seq)
		if err != nil || at == 0 {
			continue // no record's marker
		}
		if stop, err := fn(mk, at); stop || err != nil {
			return from, err
		}
	}
}

// genuine reads the record at seq a marker of kind k for value names, and
// returns it as the holder when, as the gate judges its own markers, the
// marker lies at its kind's offset in the record's batch
// (room.MarkerOffset), the record is the room's stored record, passes its
// own rules and is the one the marker names (room.Marker.Names), and, for
// a decision, is the record its key's first genuine marker names: a
// record the gate refused (its key held by another), written around the
// gate with markers at their offsets, must not close a decision the gate
// and the audit keep open. nil otherwise.
func genuine(ctx context.Context, g *jsapi.Getter, o InstanceOptions, roomID string, k room.MarkerKind, value string, mk room.Marker, seq uint64) (*validate.HeldBy, string, error) {
	if o.onGenuine != nil {
		o.onGenuine()
	}
	return judgeMarker(ctx, g, o, roomID, k, value, mk, seq)
}

// judgeMarker is genuine without the test's count: a decision's key is
// judged with it, once per decision marker.
func judgeMarker(ctx context.Context, g *jsapi.Getter, o InstanceOptions, roomID string, k room.MarkerKind, value string, mk room.Marker, seq uint64) (*validate.HeldBy, string, error) {
	if mk.Offset != room.MarkerOffset(k) {
		return nil, "", nil
	}
	rm, err := g.Seq(ctx, seq)
	if err != nil || rm == nil || rm.Subject != o.Subjects.Records(roomID) {
		return nil, "", err
	}
	rec, err := o.Validator.StoredRecord(rm.Data, events.Location{Seq: seq}, roomID)
	if err != nil || !mk.Names(rec, k, value) {
		return nil, "", nil
	}
	if k == room.MarkDecision {
		key := rec.IdempotencyKey()
		var first *validate.HeldBy
		_, err := eachMarker(ctx, g, o.Subjects.Marker(roomID, room.MarkKey, key), 1, func(kmk room.Marker, at uint64) (bool, error) {
			h, _, err := judgeMarker(ctx, g, o, roomID, room.MarkKey, key, kmk, at)
			first = h
			return h != nil, err
		})
		if err != nil || first == nil || first.Seq != seq {
			return nil, "", err
		}
	}
	return &validate.HeldBy{Digest: mk.Record, Seq: seq}, rec.Outcome(), nil
}

// EvidenceOptions says whose verified records InstanceEvidence gathers.
type EvidenceOptions struct {
	// Audit carries the read's settings (Validator, Trust, Read); its
	// Stream, Subjects and Rooms are each partition's, set by
	// InstanceEvidence from place and Room.
	Audit AuditOptions
	// Instance is the environment/ref whose records are gathered.
	Instance string
	// Room limits them to one room; "" for every room.
	Room string
}

// EvidenceReport is what InstanceEvidence gathered: the instance's verified
// records of every partition (each partition's in stream order), and how
// many messages of what was read were set aside.
type EvidenceReport struct {
	Records  []VerifiedRecord
	SetAside uint64
	// ByCode counts SetAside by refusal code (events.Code): of the
	// instance's records on marked rooms, of every message of the rooms
	// audited whole.
	ByCode map[events.Code]uint64
	// Marked counts the partitions read through instance markers,
	// Audited those some rooms of which (or all) were audited whole.
	Marked, Audited int
	// EmptyOn names the stream of EvidenceOptions.Room's partition when
	// the room was given, no record was found, and the room holds no
	// message at all there (a mistyped room, most often; audit calls such
	// a room EMPTY); "" otherwise, also when that count could not be read.
	EmptyOn string
}

// InstanceEvidence gathers the verified records of one instance over a
// deployment's partitions (place): on a stream with record markers
// through its instance markers (InstanceRecords), and, for the rooms of
// such a stream that hold records without markers and for every room of
// a stream without markers, by an audit of those rooms
// (EvidenceIndex.Instance). With o.Room, only that room's partition is
// read: where place locates it (room.Placement.Locate: a room placed
// nowhere is on the first partition, as audit finds it). Errors: the
// stream's or the audit's.
func InstanceEvidence(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, o EvidenceOptions, place *room.Placement) (*EvidenceReport, error) {
	parts := place.Partitions()
	if o.Room != "" {
		q, err := place.Locate(ctx, o.Room)
		if err != nil {
			return nil, err
		}
		parts = []room.Partition{q}
	}
	out := &EvidenceReport{ByCode: map[events.Code]uint64{}}
	for _, p := range parts {
		from := len(out.Records)
		st, err := js.Stream(ctx, p.Stream)
		if err != nil {
			return nil, fmt.Errorf("stream %s: %w", p.Stream, err)
		}
		audit := o.Audit
		audit.Stream, audit.Subjects, audit.Rooms = p.Stream, p.Subjects, nil
		if o.Room != "" {
			audit.Rooms = []string{o.Room}
		}
		if room.RecordMarkers(st.CachedInfo().Config) {
			rep, err := InstanceRecords(ctx, nc, InstanceOptions{Stream: p.Stream, Subjects: p.Subjects, Room: o.Room, Instance: o.Instance,
				Validator: o.Audit.Validator, Trust: o.Audit.Trust})
			if err != nil {
				return nil, err
			}
			out.Marked++
			out.Records = append(out.Records, rep.Records...)
			out.SetAside += uint64(len(rep.SetAside))
			for _, a := range rep.SetAside {
				out.ByCode[a.Code]++
			}
			if len(rep.Unmarked) == 0 {
				continue
			}
			audit.Rooms = rep.Unmarked
		}
		idx := NewEvidenceIndex()
		audit.OnEvent = func(ev *Event) {
			if ev.Record != nil {
				idx.Add(ev.RoomID, ev.Record, ev.Seq)
			}
		}
		rep, err := Audit(ctx, js, audit)
		if err != nil {
			return nil, err
		}
		out.Audited++
		out.SetAside += rep.Totals.SetAside
		for code, n := range rep.Totals.ByCode {
			out.ByCode[code] += uint64(n)
		}
		out.Records = append(out.Records, idx.Instance(o.Instance, o.Room)...)
		sortByStreamSeq(out.Records[from:]) // the marked rooms' records, then the audited ones'
	}
	if o.Room != "" && len(out.Records) == 0 {
		p := parts[0]
		if counts, err := jsapi.SubjectCounts(ctx, nc, p.Stream, p.Subjects.Room(o.Room), room.DefaultTimeout); err == nil && len(counts) == 0 {
			out.EmptyOn = p.Stream
		}
	}
	return out, nil
}

// firstOnSubject reports whether batch (a record at seq and messages
// stored after it) holds a marker on subj naming the record (digest,
// offset) that the server stored expecting subj empty: no message of
// the subject came before it, so the subject's first is rec's own
// marker. The server checks a Nats-Expected-Last-Subject-Sequence it
// stores, on every publish, single or in a batch (mirrors and sources
// drop the header); with Nats-Expected-Last-Subject-Sequence-Subject it
// checked another subject, which proves nothing of subj.
func firstOnSubject(batch []jsapi.Msg, subj, digest string, seq uint64) bool {
	for _, m := range batch[min(1, len(batch)):] {
		if m.Subject != subj {
			continue
		}
		mk, err := room.ParseMarker(m.Data)
		return err == nil && mk.Record == digest && mk.RecordSeq(m.Seq) == seq &&
			m.Header.Get(jetstream.ExpectedLastSubjSeqHeader) == "0" &&
			len(m.Header.Values(jetstream.ExpectedLastSubjSeqSubjHeader)) == 0
	}
	return false
}
