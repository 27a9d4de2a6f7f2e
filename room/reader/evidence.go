package reader

import (
	"sort"

	"github.com/roompub/roompub/events"
)

// VerifiedRecord is a verified execution record as the evidence index holds
// it: named by its exact ref and content digest, never by "latest".
type VerifiedRecord struct {
	RoomID    string                `json:"room"`
	Ref       string                `json:"ref"`    // execution/ref
	Digest    string                `json:"digest"` // content digest of the canonical bytes
	StreamSeq uint64                `json:"stream_seq"`
	Instance  string                `json:"instance"` // environment/ref
	Outcome   string                `json:"outcome"`
	RunRef    string                `json:"run_ref"`
	Evidence  []events.EvidenceItem `json:"evidence"`
}

// EvidenceIndex files verified execution records under the instance they
// were observed on (environment/ref). Only records that passed every rule
// are filed, so a record whose evidence names another instance
// (foreign_evidence) is filed under neither, and a record without an
// instance carries no evidence and is filed under none. It is not safe for
// concurrent use.
type EvidenceIndex struct {
	byInstance map[string][]*VerifiedRecord
	byRef      map[[2]string]*VerifiedRecord
}

// NewEvidenceIndex returns an empty index.
func NewEvidenceIndex() *EvidenceIndex {
	return &EvidenceIndex{byInstance: map[string][]*VerifiedRecord{}, byRef: map[[2]string]*VerifiedRecord{}}
}

// Add files a record that has passed every rule (a Reader's event) under
// its instance. Callers must not add unverified records.
func (x *EvidenceIndex) Add(roomID string, rec *events.Record, seq uint64) {
	_, ok := rec.EnvironmentRef()
	vr := new(verifiedRecord(roomID, rec, seq))
	x.byRef[[2]string{vr.Ref, vr.Digest}] = vr
	if ok {
		x.byInstance[vr.Instance] = append(x.byInstance[vr.Instance], vr)
	}
}

// verifiedRecord is rec, stored in roomID at stream sequence seq, as the
// evidence index and InstanceRecords name it.
func verifiedRecord(roomID string, rec *events.Record, seq uint64) VerifiedRecord {
	env, _ := rec.EnvironmentRef()
	return VerifiedRecord{RoomID: roomID, Ref: rec.ComputedRef(), Digest: rec.ContentDigest(), StreamSeq: seq,
		Instance: env, Outcome: rec.Outcome(), RunRef: rec.RunRef(), Evidence: rec.Evidence()}
}

// Instance returns the verified records observed on instance, in stream
// order, optionally only those of roomID ("" for every room). Every
// evidence item of every returned record names instance.
func (x *EvidenceIndex) Instance(instance, roomID string) []VerifiedRecord {
	var out []VerifiedRecord
	for _, vr := range x.byInstance[instance] {
		if roomID == "" || vr.RoomID == roomID {
			out = append(out, *vr)
		}
	}
	// An audit hands out each room's records in stream order, the rooms
	// side by side.
	sortByStreamSeq(out)
	return out
}

// sortByStreamSeq sorts records of one stream by stream sequence.
func sortByStreamSeq(recs []VerifiedRecord) {
	sort.SliceStable(recs, func(i, j int) bool { return recs[i].StreamSeq < recs[j].StreamSeq })
}

// Get returns the verified record with exactly this execution/ref and
// content digest.
func (x *EvidenceIndex) Get(ref, digest string) (VerifiedRecord, bool) {
	vr, ok := x.byRef[[2]string{ref, digest}]
	if !ok {
		return VerifiedRecord{}, false
	}
	return *vr, true
}

// Instances lists the instances that have verified records, sorted.
func (x *EvidenceIndex) Instances() []string {
	out := make([]string, 0, len(x.byInstance))
	for k := range x.byInstance {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
