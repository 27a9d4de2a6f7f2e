package room

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"sync"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room/internal/jsapi"
)

// DefaultPlacementBucket is the JetStream key-value bucket that records
// where each room and each chain lives (docs/design.md, "Partitions"): the
// deployment's partitions, each room's partition and each chain's room.
const DefaultPlacementBucket = "ROOMPUB_PLACEMENT"

// MaxPartitions bounds a deployment's room streams: each is a Raft group
// on the cluster, so past a few dozen the servers' CPU, not the leaders,
// is the limit (docs/operations.md, "Capacity").
const MaxPartitions = 64

// ErrPlacement is wrapped by the Placement methods when the bucket holds
// something roompub did not write, or a layout that contradicts the one
// asked for.
var ErrPlacement = errors.New("room placement")

// Partition is one room stream of a deployment with its subject layout.
type Partition struct {
	Stream   string
	Subjects Subjects
}

// MarshalJSON writes {"stream":…,"prefix":…}, the form the placement
// bucket records.
func (p Partition) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Stream string `json:"stream"`
		Prefix string `json:"prefix"`
	}{p.Stream, p.Subjects.Root()})
}

// UnmarshalJSON reads MarshalJSON's form; both fields are required.
func (p *Partition) UnmarshalJSON(b []byte) error {
	var v struct {
		Stream *string `json:"stream"`
		Prefix *string `json:"prefix"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	if v.Stream == nil || v.Prefix == nil || *v.Stream == "" || *v.Prefix == "" {
		return fmt.Errorf("%w: a partition names its stream and prefix", ErrPlacement)
	}
	p.Stream, p.Subjects = *v.Stream, Subjects{Prefix: *v.Prefix}
	return nil
}

// Layout names a deployment's room streams: partition 0 is Stream with
// Subjects (the one room stream of a deployment without partitions), and
// partition i > 0 is Stream + "-" + i with prefix Subjects.Root() + "-" +
// i. Which partition a room is on is recorded in the placement bucket,
// never computed from Partitions, so partitions can be added without
// moving a room (docs/design.md, "Partitions").
type Layout struct {
	Stream     string   // partition 0's stream; default DefaultStream
	Subjects   Subjects // partition 0's subjects; default prefix DefaultPrefix
	Partitions int      // room streams; 0 or 1: one
	Bucket     string   // placement bucket; default DefaultPlacementBucket
}

// Count is how many partitions the layout has: at least 1.
func (l Layout) Count() int { return max(l.Partitions, 1) }

// Partition returns partition i (0 ≤ i < MaxPartitions) of the layout.
func (l Layout) Partition(i int) Partition {
	stream := l.Stream
	if stream == "" {
		stream = DefaultStream
	}
	if i == 0 {
		return Partition{Stream: stream, Subjects: Subjects{Prefix: l.Subjects.Root()}}
	}
	n := strconv.Itoa(i)
	return Partition{Stream: stream + "-" + n, Subjects: Subjects{Prefix: l.Subjects.Root() + "-" + n}}
}

// All lists the layout's partitions, partition 0 first.
func (l Layout) All() []Partition {
	ps := make([]Partition, l.Count())
	for i := range ps {
		ps[i] = l.Partition(i)
	}
	return ps
}

// BucketName is the placement bucket's name.
func (l Layout) BucketName() string {
	if l.Bucket == "" {
		return DefaultPlacementBucket
	}
	return l.Bucket
}

// Check reports a layout roompub cannot serve: too many partitions.
func (l Layout) Check() error {
	if l.Partitions < 0 || l.Partitions > MaxPartitions {
		return fmt.Errorf("%w: %d partitions, want 1 to %d", ErrPlacement, l.Partitions, MaxPartitions)
	}
	return nil
}

// Placement keys: partitionsKey holds the partitions as JSON, in order;
// roomKeyPrefix + kvToken(room id) a room's Partition; chainKeyPrefix +
// kvToken(run id) + "." + kvToken(capsule id) the room id holding the
// chain (a key's tokens must be [-_=A-Za-z0-9], so ids are base64url).
const (
	partitionsKey  = "partitions"
	roomKeyPrefix  = "room."
	chainKeyPrefix = "chain."
)

// kvToken is s as one key token: raw base64url, "=" for the empty string
// (no base64url text is "=").
func kvToken(s string) string {
	if s == "" {
		return "="
	}
	return base64.RawURLEncoding.EncodeToString([]byte(s))
}

// Placement is a deployment's placement bucket: where each room and each
// chain lives. Room placements are cached (a room never moves). It is
// safe for concurrent use.
type Placement struct {
	kv    jetstream.KeyValue
	parts []Partition

	mu    sync.Mutex
	rooms map[string]Partition // placed rooms, bounded by maxCachedRooms
}

// maxCachedRooms bounds the cache of room placements; past it the cache
// starts over (a miss costs one key-value get).
const maxCachedRooms = 1 << 16

// OpenPlacement binds the layout's placement bucket, creating it (file
// storage, history 1, replicas) when create is set and it does not exist,
// and records the layout's partitions. A bucket that already records
// partitions must list the layout's as its first ones or be extended by
// them (partitions are added, never removed or renamed); Partitions() is
// then the longer list. Without create, a missing bucket is a deployment
// of one partition, the layout's partition 0 (a store of a release
// without partitions). Errors wrap ErrPlacement for a contradicting
// layout.
func OpenPlacement(ctx context.Context, js jetstream.JetStream, l Layout, replicas int, create bool) (*Placement, error) {
	if err := l.Check(); err != nil {
		return nil, err
	}
	ctx, cancel := jsapi.WithDefaultTimeout(ctx, DefaultTimeout)
	defer cancel()
	name := l.BucketName()
	kv, err := js.KeyValue(ctx, name)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		// Partition 1's stream exists only in a deployment that recorded
		// its partitions: the bucket is lost, and a layout made anew
		// would read one partition, or place rooms and chains anew
		// (a capsule in two rooms).
		// A lookup that fails otherwise (an identity of an older
		// authconf may not ask) says nothing either way.
		second := l.Partition(1).Stream
		if _, serr := js.Stream(ctx, second); serr == nil {
			return nil, fmt.Errorf("%w: the placement bucket %s is gone while room stream %s exists: the deployment has partitions, "+
				"and without the bucket no room can be found or placed: restore the bucket (docs/operations.md, \"Backup and restore\")", ErrPlacement, name, second)
		}
		if !create {
			return &Placement{parts: []Partition{l.Partition(0)}, rooms: map[string]Partition{}}, nil
		}
		kv, err = js.CreateKeyValue(ctx, jetstream.KeyValueConfig{
			Bucket:      name,
			Description: "roompub: each room's stream and each chain's room, recorded once",
			History:     1,
			Storage:     jetstream.FileStorage,
			Replicas:    max(replicas, 1),
		})
		if errors.Is(err, jetstream.ErrBucketExists) {
			kv, err = js.KeyValue(ctx, name) // another publisher made it first
		}
	}
	if err != nil {
		return nil, fmt.Errorf("placement bucket %s: %w", name, err)
	}
	p := &Placement{kv: kv, rooms: map[string]Partition{}}
	want := l.All()
	for {
		e, err := kv.Get(ctx, partitionsKey)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			if !create {
				p.parts = want[:1]
				return p, nil
			}
			_, err = kv.Create(ctx, partitionsKey, mustJSON(want))
			if errors.Is(err, jetstream.ErrKeyExists) {
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("placement bucket %s: record partitions: %w", name, err)
			}
			p.parts = want
			return p, nil
		case err != nil:
			return nil, fmt.Errorf("placement bucket %s: %w", name, err)
		}
		var have []Partition
		if err := json.Unmarshal(e.Value(), &have); err != nil || len(have) == 0 {
			return nil, fmt.Errorf("%w: bucket %s: key %s is not a list of partitions", ErrPlacement, name, partitionsKey)
		}
		n := min(len(have), len(want))
		if !slices.Equal(have[:n], want[:n]) {
			return nil, fmt.Errorf("%w: bucket %s records partitions %s, which this layout (%s) does not extend: partitions are added, never renamed",
				ErrPlacement, name, partitionNames(have), partitionNames(want))
		}
		if !create || len(want) <= len(have) {
			p.parts = have
			return p, nil
		}
		if _, err := kv.Update(ctx, partitionsKey, mustJSON(want), e.Revision()); err != nil {
			if errors.Is(err, jetstream.ErrKeyExists) {
				continue // another publisher changed it: read again
			}
			return nil, fmt.Errorf("placement bucket %s: record partitions: %w", name, err)
		}
		p.parts = want
		return p, nil
	}
}

func partitionNames(ps []Partition) string {
	names := make([]string, len(ps))
	for i, p := range ps {
		names[i] = p.Stream
	}
	return fmt.Sprint(names)
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only Partition values, which always marshal
	}
	return b
}

// Partitions lists the deployment's partitions as recorded, partition 0
// first.
func (p *Placement) Partitions() []Partition { return slices.Clone(p.parts) }

// Recorded reports whether the bucket exists; without it every room is on
// partition 0.
func (p *Placement) Recorded() bool { return p.kv != nil }

// partitionOf returns the recorded partition with stream name s.
func (p *Placement) partitionOf(s string) (Partition, bool) {
	for _, q := range p.parts {
		if q.Stream == s {
			return q, true
		}
	}
	return Partition{}, false
}

// Room returns the partition roomID is placed on; false when it is placed
// nowhere yet. Without a bucket, or with one partition, every room is on
// partition 0.
func (p *Placement) Room(ctx context.Context, roomID string) (Partition, bool, error) {
	if p.kv == nil || len(p.parts) == 1 {
		return p.parts[0], true, nil
	}
	p.mu.Lock()
	q, ok := p.rooms[roomID]
	p.mu.Unlock()
	if ok {
		return q, true, nil
	}
	ctx, cancel := jsapi.WithDefaultTimeout(ctx, DefaultTimeout)
	defer cancel()
	e, err := p.kv.Get(ctx, roomKeyPrefix+kvToken(roomID))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Partition{}, false, nil
	}
	if err != nil {
		return Partition{}, false, fmt.Errorf("placement of %s: %w", roomID, err)
	}
	return p.cache(roomID, e.Value())
}

func (p *Placement) cache(roomID string, v []byte) (Partition, bool, error) {
	var q Partition
	if err := json.Unmarshal(v, &q); err != nil {
		return Partition{}, false, fmt.Errorf("%w: placement of %s: %v", ErrPlacement, roomID, err)
	}
	known, ok := p.partitionOf(q.Stream)
	if !ok || known != q {
		return Partition{}, false, fmt.Errorf("%w: %s is placed on %s, which is not one of the partitions %s", ErrPlacement, roomID, q.Stream, partitionNames(p.parts))
	}
	p.mu.Lock()
	if len(p.rooms) >= maxCachedRooms {
		clear(p.rooms)
	}
	p.rooms[roomID] = q
	p.mu.Unlock()
	return q, true, nil
}

// Holds reports whether partition q's stream holds any message of a room
// (the room's subject filter), for Propose.
type Holds func(ctx context.Context, q Partition, roomID string) (bool, error)

// Propose returns roomID's partition when it is placed (placed true). A
// room placed nowhere that a partition already holds messages of (written
// before placements were recorded; holds asks) is placed there now, a
// fact rather than a choice. Otherwise it returns the partition the room
// id's FNV-1a hash picks, recording nothing: the gate records it (Record)
// only when it is about to append the room's first message, so a refused
// request places nothing.
func (p *Placement) Propose(ctx context.Context, roomID string, holds Holds) (q Partition, placed bool, err error) {
	if q, ok, err := p.Room(ctx, roomID); err != nil || ok {
		return q, ok, err
	}
	for _, c := range p.parts {
		has, err := holds(ctx, c, roomID)
		if err != nil {
			return Partition{}, false, fmt.Errorf("placement of %s: %w", roomID, err)
		}
		if has {
			q, err := p.Record(ctx, roomID, c)
			return q, err == nil, err
		}
	}
	h := fnv.New32a()
	h.Write([]byte(roomID))
	return p.parts[h.Sum32()%uint32(len(p.parts))], false, nil
}

// Record places roomID on q unless it is placed already, and returns
// where it is placed: q, or the partition another gate recorded first.
// The placement is created with a compare-and-set, so gates placing one
// room at once agree; a caller whose q lost must not append there.
func (p *Placement) Record(ctx context.Context, roomID string, q Partition) (Partition, error) {
	if have, ok, err := p.Room(ctx, roomID); err != nil || ok {
		return have, err
	}
	ctx, cancel := jsapi.WithDefaultTimeout(ctx, DefaultTimeout)
	defer cancel()
	key := RoomPlacementKey(roomID)
	v := mustJSON(q)
	if _, err := p.kv.Create(ctx, key, v); err != nil {
		if !errors.Is(err, jetstream.ErrKeyExists) {
			return Partition{}, fmt.Errorf("placement of %s: %w", roomID, err)
		}
		e, err := p.kv.Get(ctx, key)
		if err != nil {
			return Partition{}, fmt.Errorf("placement of %s: %w", roomID, err)
		}
		v = e.Value()
	}
	have, _, err := p.cache(roomID, v)
	return have, err
}

// chainClaim is a chain's record: the room it lives in.
type chainClaim struct {
	Room string `json:"room"`
}

// ClaimChain records that the chain key lives in roomID, unless another
// room already holds it: the room it returns is the chain's, roomID when
// the claim is (or already was) roomID's. The claim is a compare-and-set,
// so of gates racing one chain into two rooms exactly one gets its room
// back; the others refuse room_conflict (seed 000: a capsule lives in one
// room). Without a bucket, or with one partition, it claims nothing and
// returns roomID: the room stream's own expected last sequence over the
// chain's subjects in every room decides.
func (p *Placement) ClaimChain(ctx context.Context, key events.ChainKey, roomID string) (string, error) {
	if p.kv == nil || len(p.parts) == 1 {
		return roomID, nil
	}
	ctx, cancel := jsapi.WithDefaultTimeout(ctx, DefaultTimeout)
	defer cancel()
	k := ChainClaimKey(key)
	if _, err := p.kv.Create(ctx, k, mustJSON(chainClaim{Room: roomID})); err == nil {
		return roomID, nil
	} else if !errors.Is(err, jetstream.ErrKeyExists) {
		return "", fmt.Errorf("claim of chain %s/%s: %w", key.RunID, key.CapsuleID, err)
	}
	e, err := p.kv.Get(ctx, k)
	if err != nil {
		return "", fmt.Errorf("claim of chain %s/%s: %w", key.RunID, key.CapsuleID, err)
	}
	var c chainClaim
	if err := json.Unmarshal(e.Value(), &c); err != nil || c.Room == "" {
		return "", fmt.Errorf("%w: the claim of chain %s/%s is not roompub's", ErrPlacement, key.RunID, key.CapsuleID)
	}
	return c.Room, nil
}

// ChainClaimKey is the placement bucket's key of a chain's claim.
func ChainClaimKey(key events.ChainKey) string {
	return chainKeyPrefix + kvToken(key.RunID) + "." + kvToken(key.CapsuleID)
}

// RoomPlacementKey is the placement bucket's key of a room's partition.
func RoomPlacementKey(roomID string) string { return roomKeyPrefix + kvToken(roomID) }

// Locate is the partition a reader finds roomID on: its placement, or,
// for a room placed nowhere, the first partition, where every room
// written before placements were recorded is (and where a room never
// written reads as empty).
func (p *Placement) Locate(ctx context.Context, roomID string) (Partition, error) {
	q, ok, err := p.Room(ctx, roomID)
	if err != nil || !ok {
		return p.parts[0], err
	}
	return q, nil
}

// ChainRoom returns the room the chain key is claimed for; false when it
// is claimed for none (or there is no bucket).
func (p *Placement) ChainRoom(ctx context.Context, key events.ChainKey) (string, bool, error) {
	if p.kv == nil {
		return "", false, nil
	}
	ctx, cancel := jsapi.WithDefaultTimeout(ctx, DefaultTimeout)
	defer cancel()
	e, err := p.kv.Get(ctx, ChainClaimKey(key))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("claim of chain %s/%s: %w", key.RunID, key.CapsuleID, err)
	}
	var c chainClaim
	if err := json.Unmarshal(e.Value(), &c); err != nil || c.Room == "" {
		return "", false, fmt.Errorf("%w: the claim of chain %s/%s is not roompub's", ErrPlacement, key.RunID, key.CapsuleID)
	}
	return c.Room, true, nil
}

// RecordedPartitions reads the partitions the bucket records now: more than
// Partitions() when another serve added some since this one opened the
// bucket. Without a bucket, Partitions().
func (p *Placement) RecordedPartitions(ctx context.Context) ([]Partition, error) {
	if p.kv == nil {
		return p.Partitions(), nil
	}
	ctx, cancel := jsapi.WithDefaultTimeout(ctx, DefaultTimeout)
	defer cancel()
	e, err := p.kv.Get(ctx, partitionsKey)
	if err != nil {
		return nil, fmt.Errorf("placement bucket: %w", err)
	}
	var have []Partition
	if err := json.Unmarshal(e.Value(), &have); err != nil || len(have) == 0 {
		return nil, fmt.Errorf("%w: key %s is not a list of partitions", ErrPlacement, partitionsKey)
	}
	return have, nil
}
