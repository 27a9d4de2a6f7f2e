package room

import (
	"strconv"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
)

// DefaultDeploymentStream and DefaultDeploymentPrefix name the deployment
// log's stream and the first token of its subjects (docs/witnesses.md,
// "The deployment log"). The deployment log has a stream of its own so it
// does not depend on how rooms are spread over streams.
const (
	DefaultDeploymentStream = "ROOMPUB_DEPLOYMENT"
	DefaultDeploymentPrefix = "roompub_deployment"
)

// SourceHeader names, on a deployment log entry, where the room checkpoint
// it holds was stored: "<room stream> <stream seq>". It is not part of the
// entry (the leaf is the checkpoint's bytes); the writer resumes from it.
const SourceHeader = "Roompub-Source"

// DeploymentLog names the deployment log's stream and subjects. The zero
// value is the defaults.
type DeploymentLog struct {
	Stream string // default DefaultDeploymentStream
	Prefix string // one subject token, default DefaultDeploymentPrefix
}

// StreamName is the deployment log's stream.
func (d DeploymentLog) StreamName() string {
	if d.Stream == "" {
		return DefaultDeploymentStream
	}
	return d.Stream
}

func (d DeploymentLog) prefix() string {
	if d.Prefix == "" {
		return DefaultDeploymentPrefix
	}
	return d.Prefix
}

// Entry is the subject of the log's entries: each a room checkpoint
// exactly as stored on the room's checkpoint subject, in the order the
// writer read them; the log's leaves, in stream order.
func (d DeploymentLog) Entry() string { return d.prefix() + ".entry" }

// Checkpoint is the subject of the log's signed checkpoints, each with the
// witnesses' cosignatures collected for it (C2SP tlog-cosignature lines
// after the publisher's signature line).
func (d DeploymentLog) Checkpoint() string { return d.prefix() + ".checkpoint" }

// Subjects is the stream's subject filter.
func (d DeploymentLog) Subjects() Subjects { return Subjects{Prefix: d.prefix()} }

// StreamConfig is the deployment log's stream: append-only as the room
// stream (StreamConfig), without atomic batches (one writer appends one
// entry at a time).
func (d DeploymentLog) StreamConfig(replicas int) jetstream.StreamConfig {
	cfg := StreamConfig(d.StreamName(), d.Subjects(), replicas)
	cfg.Description = "roompub deployment log: every room checkpoint, witnessed"
	cfg.AllowAtomicPublish = false
	cfg.Metadata = map[string]string{"roompub": "deployment/v1"}
	return cfg
}

// FormatSource is the SourceHeader value of a room checkpoint stored at
// seq of stream.
func FormatSource(stream string, seq uint64) string {
	return stream + " " + strconv.FormatUint(seq, 10)
}

// ParseSource reverses FormatSource; false for anything else.
func ParseSource(v string) (stream string, seq uint64, ok bool) {
	stream, n, ok := strings.Cut(v, " ")
	if !ok || stream == "" {
		return "", 0, false
	}
	seq, err := strconv.ParseUint(n, 10, 64)
	if err != nil || strconv.FormatUint(seq, 10) != n {
		return "", 0, false
	}
	return stream, seq, true
}
