package checkpointer

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/roompub/roompub/checkpoint"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/internal/jsapi"
)

// lease is the writer's hold on one room's lease key.
type lease struct {
	rev       uint64 // revision of the last create or update; 0: not held
	renewedAt time.Time
	retryAt   time.Time // not held: do not try to take it before
}

func leaseBucketName(o Options) string {
	if o.LeaseBucket == "" {
		return room.DefaultLeaseBucket
	}
	return o.LeaseBucket
}

// leaseBucket binds the lease bucket, creating it when it does not exist,
// and returns it with its TTL.
func leaseBucket(ctx context.Context, js jetstream.JetStream, o Options) (jetstream.KeyValue, time.Duration, error) {
	bucket := leaseBucketName(o)
	kv, err := js.KeyValue(ctx, bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		ttl := o.LeaseTTL
		if ttl <= 0 {
			ttl = DefaultLeaseTTL
		}
		for attempt := 0; ; attempt++ {
			kv, err = js.CreateKeyValue(ctx, jetstream.KeyValueConfig{
				Bucket:      bucket,
				Description: "roompub checkpoint leases: one key per room, the writer's signed lease statement",
				History:     1,
				TTL:         ttl,
				Storage:     jetstream.FileStorage,
				Replicas:    max(o.Replicas, 1),
			})
			// A cluster still forming may not place a replicated bucket
			// yet ("no suitable peers for placement", 10005, or no
			// answer): waited out within ctx, as serve waits for the
			// room stream.
			var apiErr *jetstream.APIError
			again := jsapi.IsRetryable(err) || errors.As(err, &apiErr) && apiErr.ErrorCode == 10005
			if !again || !jsapi.Sleep(ctx, jsapi.Backoff(attempt)) {
				break
			}
		}
		if errors.Is(err, jetstream.ErrBucketExists) {
			kv, err = js.KeyValue(ctx, bucket) // another publisher made it first
		}
	}
	if err != nil {
		return nil, 0, fmt.Errorf("lease bucket %s: %w", bucket, err)
	}
	st, err := kv.Status(ctx)
	if err != nil {
		return nil, 0, fmt.Errorf("lease bucket %s: %w", bucket, err)
	}
	if st.TTL() <= 0 {
		return nil, 0, fmt.Errorf("lease bucket %s has no TTL: a lease would never lapse", bucket)
	}
	return kv, st.TTL(), nil
}

// LeaseKey is the lease bucket's key of a room: its subject token (without
// "room:") with '~' written '=' and ':' written '/', two characters a
// key-value key may hold and a token never does, so the key is injective.
func LeaseKey(roomID string) string {
	return leaseKeyReplacer.Replace(room.RoomToken(roomID))
}

var leaseKeyReplacer = strings.NewReplacer("~", "=", ":", "/")

// DefaultLeaseSkew is how far a lease's signed time may lie ahead of this
// publisher's clock, and past the lease bucket's TTL, before the lease is
// not honoured (clocks of publishers differ by that much at most).
const DefaultLeaseSkew = 5 * time.Second

// Reasons a lease value is not honoured, the values of the reason label of
// roompub_checkpoint_leases_overridden_total.
const (
	leaseUnsigned  = "unsigned"  // not a lease statement whose signature verifies for the key (a bare node id included)
	leaseUntrusted = "untrusted" // signed by a key that is not trusted
	leaseStale     = "stale"     // older than the bucket's TTL plus the skew: replayed
	leaseFuture    = "future"    // later than now plus the skew
)

// judgeLease decides whether the lease value of key, read at now, is
// honoured: a lease statement signed by a trusted publisher for key
// (checkpoint.SignLease) whose time is within the bucket's TTL plus the
// skew before now and no more than the skew after it. It returns "" and
// the holder, or the reason it is not honoured and the error behind it.
func (c *Checkpointer) judgeLease(key string, value []byte, now time.Time) (why, holder string, err error) {
	l, err := c.trust.VerifyLease(key, value)
	skew := time.Duration(c.leaseSkew.Load())
	switch {
	case errors.Is(err, checkpoint.ErrUntrustedPublisher):
		return leaseUntrusted, "", err
	case err != nil:
		return leaseUnsigned, "", err
	case l.At.Before(now.Add(-c.ttl - skew)):
		return leaseStale, l.NodeID, fmt.Errorf("taken or renewed at %s, more than the TTL (%s) and %s before now", l.At.Format(time.RFC3339Nano), c.ttl, skew)
	case l.At.After(now.Add(skew)):
		return leaseFuture, l.NodeID, fmt.Errorf("taken or renewed at %s, more than %s after now", l.At.Format(time.RFC3339Nano), skew)
	}
	return "", l.NodeID, nil
}

// holdLease reports whether this checkpointer holds r's lease now, renewing
// it when a third of the TTL has passed and taking it when it is free or
// its value is not honoured (judgeLease): then by revision, so a lease
// another publisher took meanwhile is left alone.
func (c *Checkpointer) holdLease(ctx context.Context, r *ckRoom) bool {
	return c.hold(ctx, &r.lease, LeaseKey(r.id), r.id)
}

// hold is holdLease for any lease l of key; what names it in logs (a room
// id, or the deployment log).
func (c *Checkpointer) hold(ctx context.Context, l *lease, key, what string) bool {
	now := time.Now()
	lctx, cancel := jsapi.WithDefaultTimeout(ctx, room.DefaultTimeout)
	defer cancel()
	if l.rev != 0 && now.Sub(l.renewedAt) < c.ttl/3 {
		return true
	}
	value, err := checkpoint.SignLease(c.key, key, now)
	if err != nil { // cannot happen: LeaseKey holds no space or control character
		c.log.Error("checkpointer: cannot sign the room's lease", zap.String("room", what), zap.Error(err))
		return false
	}
	if l.rev != 0 {
		rev, err := c.kv.Update(lctx, key, []byte(value), l.rev)
		if err == nil {
			l.rev, l.renewedAt = rev, now
			return true
		}
		if !errors.Is(err, jetstream.ErrKeyExists) && !jsapi.IsWrongLastSequence(err) {
			// No answer: the lease may still be ours; do not write on it.
			if ctx.Err() == nil {
				c.log.Warn("checkpointer: renewing a lease failed", zap.String("room", what), zap.Error(err))
			}
			return false
		}
		// Lapsed, or taken by another publisher: take it again if free.
		l.rev = 0
		c.m.leases.Dec()
		c.log.Info("checkpointer: lease lapsed", zap.String("room", what))
	}
	if now.Before(l.retryAt) {
		return false
	}
	rev, err := c.kv.Create(lctx, key, []byte(value))
	if errors.Is(err, jetstream.ErrKeyExists) {
		rev, err = c.overrideLease(lctx, what, key, value, now)
	}
	if err != nil {
		l.retryAt = now.Add(c.ttl / 3)
		if !errors.Is(err, jetstream.ErrKeyExists) && ctx.Err() == nil {
			c.log.Warn("checkpointer: taking a lease failed", zap.String("room", what), zap.Error(err))
		}
		return false
	}
	if rev == 0 {
		// Not honoured, and changed before it could be taken over: try
		// again at the next write (a writer of junk goes on writing).
		return false
	}
	l.rev, l.renewedAt = rev, now
	c.m.leases.Inc()
	c.log.Info("checkpointer: lease taken", zap.String("room", what), zap.String("key", key))
	return true
}

// overrideLease reads the lease of key that Create found and takes it over
// with value, by revision, when judgeLease does not honour it. It returns
// the new revision; 0 and no error when the key changed before the update
// (decided again at the next write); ErrKeyExists when the lease is
// honoured.
func (c *Checkpointer) overrideLease(ctx context.Context, what, key, value string, now time.Time) (uint64, error) {
	en, err := c.kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return 0, nil // lapsed or released since Create
	}
	if err != nil {
		return 0, err
	}
	why, holder, verr := c.judgeLease(key, en.Value(), now)
	if why == "" {
		return 0, jetstream.ErrKeyExists
	}
	rev, err := c.kv.Update(ctx, key, []byte(value), en.Revision())
	if errors.Is(err, jetstream.ErrKeyExists) || jsapi.IsWrongLastSequence(err) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	c.m.overridden.WithLabelValues(why).Inc()
	c.log.Warn("checkpointer: the room's lease was not held by a trusted publisher: taken over",
		zap.String("room", what), zap.String("key", key), zap.Uint64("revision", en.Revision()), zap.String("why", why),
		zap.String("holder", holder), zap.Error(verr))
	return rev, nil
}

// releaseLease deletes r's lease by the revision this checkpointer last
// wrote. A lease that is no longer at that revision lapsed (its TTL ran
// out since the last renewal: a quiet room's lease is renewed only when a
// checkpoint is due) or was taken over by another publisher: there is
// nothing of ours to release, which is normal at shutdown and logged at
// debug. Any other failure is a warning: the lease lingers until its TTL.
func (c *Checkpointer) releaseLease(ctx context.Context, r *ckRoom) {
	c.release(ctx, &r.lease, LeaseKey(r.id), r.id)
}

// release is releaseLease for any lease l of key.
func (c *Checkpointer) release(ctx context.Context, l *lease, key, what string) {
	err := c.kv.Delete(ctx, key, jetstream.LastRevision(l.rev))
	switch {
	case err == nil:
		c.log.Debug("checkpointer: lease released", zap.String("room", what))
	case errors.Is(err, jetstream.ErrKeyExists) || jsapi.IsWrongLastSequence(err):
		c.log.Debug("checkpointer: lease not released: it lapsed or another publisher took it over",
			zap.String("room", what), zap.Uint64("revision", l.rev))
	default:
		c.log.Warn("checkpointer: releasing a lease failed: it lingers until its TTL",
			zap.String("room", what), zap.Error(err))
	}
}
