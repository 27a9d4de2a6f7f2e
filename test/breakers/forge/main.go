// Command forge publishes a plan of raw messages (lines "subject<TAB>base64
// payload", optionally "<TAB>Nats-Msg-Id") straight into a JetStream stream, bypassing roompub's gate, to
// test what readers make of forged, forked and corrupt messages.
//
//	go run ./test/breakers/forge nats://127.0.0.1:4222 plan.txt
package main

import (
	"bufio"
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func main() {
	if err := run(os.Args[1], os.Args[2]); err != nil {
		fmt.Fprintln(os.Stderr, "forge:", err)
		os.Exit(1)
	}
}

func run(url, plan string) error {
	nc, err := nats.Connect(url)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	f, err := os.Open(plan)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 64<<20)
	n := 0
	for sc.Scan() {
		subj, b64, _ := strings.Cut(sc.Text(), "\t")
		b64, msgID, _ := strings.Cut(b64, "\t")
		data, err := base64.StdEncoding.DecodeString(b64)
		if err != nil {
			return err
		}
		var opts []jetstream.PublishOpt
		if msgID != "" {
			opts = append(opts, jetstream.WithMsgID(msgID))
		}
		if _, err := js.PublishAsync(subj, data, opts...); err != nil {
			return fmt.Errorf("line %d: %w", n+1, err)
		}
		n++
		if n%500 == 0 {
			select {
			case <-js.PublishAsyncComplete():
			case <-time.After(60 * time.Second):
				return fmt.Errorf("stalled")
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	select {
	case <-js.PublishAsyncComplete():
	case <-ctx.Done():
		return ctx.Err()
	}
	fmt.Println("published", n)
	return sc.Err()
}
