package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// rawReadEnv, when set, makes this binary the raw reader of the read
// scenario instead of the bench: the value is a rawReadJob in JSON. The
// raw read runs in a process of its own, as `subscriber audit` does, so
// that neither reader shares the embedded server's process (and its
// GOMAXPROCS) and both are timed alike, from start to exit.
const rawReadEnv = "ROOMPUB_BENCH_RAW_READ"

// rawReadJob is what the raw reader reads.
type rawReadJob struct {
	URL    string `json:"url"`
	Stream string `json:"stream"`
	Filter string `json:"filter"`
	Want   int    `json:"want"`
}

// rawReadResult is what the raw reader prints, as one JSON line.
type rawReadResult struct {
	Count int   `json:"count"`
	Bytes int64 `json:"bytes"`
}

// rawReadMain runs the raw reader: connect, one ordered consumer over the
// job's filter until it has read Want messages, print the result.
func rawReadMain(job string, stdout, stderr io.Writer) int {
	var j rawReadJob
	if err := json.Unmarshal([]byte(job), &j); err != nil {
		fmt.Fprintf(stderr, "roompub-bench raw reader: %s: %v\n", rawReadEnv, err)
		return 2
	}
	nc, err := nats.Connect(j.URL, nats.Name("roompub-bench-raw-reader"))
	if err != nil {
		fmt.Fprintf(stderr, "roompub-bench raw reader: %v\n", err)
		return 2
	}
	defer nc.Close()
	ctx := context.Background()
	js, err := jetstream.New(nc)
	if err == nil {
		var st jetstream.Stream
		if st, err = js.Stream(ctx, j.Stream); err == nil {
			var res rawReadResult
			if res.Count, res.Bytes, err = orderedRead(ctx, st, j.Filter, j.Want); err == nil {
				err = json.NewEncoder(stdout).Encode(res)
			}
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "roompub-bench raw reader: %v\n", err)
		return 2
	}
	return 0
}

// rawReadProcess runs the raw reader as a subprocess of this binary and
// returns what it read and how long it ran, from start to exit.
func (b *bench) rawReadProcess(job rawReadJob) (side, error) {
	self, err := os.Executable()
	if err != nil {
		return side{}, err
	}
	spec, _ := json.Marshal(job)
	cmd := exec.CommandContext(b.ctx, self)
	cmd.Env = append(os.Environ(), rawReadEnv+"="+string(spec))
	var errOut []byte
	t := timer{wall: time.Now(), cpu: cpuTime()}
	out, err := cmd.Output()
	var took side
	t.stop(&took)
	if ee, ok := err.(*exec.ExitError); ok {
		errOut = ee.Stderr
	}
	if err != nil {
		return side{}, fmt.Errorf("raw reader: %v\n%s", err, errOut)
	}
	var res rawReadResult
	if err := json.Unmarshal(out, &res); err != nil {
		return side{}, fmt.Errorf("raw reader's result %q: %w", out, err)
	}
	return side{n: res.Count, bytes: res.Bytes, dur: took.dur, cpu: took.cpu}, nil
}

// orderedRead reads every message on filter with an ordered consumer until
// it has want of them, and returns how many and their payload bytes.
func orderedRead(ctx context.Context, st jetstream.Stream, filter string, want int) (int, int64, error) {
	cons, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{filter}, DeliverPolicy: jetstream.DeliverAllPolicy})
	if err != nil {
		return 0, 0, err
	}
	it, err := cons.Messages()
	if err != nil {
		return 0, 0, err
	}
	defer it.Stop()
	n, size := 0, int64(0)
	for n < want {
		m, err := it.Next()
		if err != nil {
			return n, size, fmt.Errorf("ordered read after %d messages: %w", n, err)
		}
		n++
		size += int64(len(m.Data()))
	}
	return n, size, nil
}
