package node_test

import (
	"bufio"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room/node"
)

// TestServeLogsAsyncErrors: an ingest request whose header block nats.go
// cannot decode (a stray client's) is an asynchronous error of serve's
// connection; it goes to serve's log at warn level, naming the connection
// and the subscription's subject, where nats.go would print it to stderr
// outside the log an operator reads.
func TestServeLogsAsyncErrors(t *testing.T) {
	core, logs := observer.New(zap.WarnLevel)
	s := startServeWith(t, time.Hour, func(o *node.ServeOptions, _ *events.HostKey) { o.Logger = zap.New(core) })
	c, err := net.Dial("tcp", strings.TrimPrefix(s.info.ClientURL, "nats://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	r := bufio.NewReader(c)
	if _, err := r.ReadString('\n'); err != nil { // INFO
		t.Fatal(err)
	}
	hdr := "NATS/1.0\r\na line without a colon\r\n\r\n"
	fmt.Fprintf(c, "CONNECT {\"verbose\":false,\"headers\":true,\"protocol\":1}\r\nHPUB roompub.v1.head %d %d\r\n%sx\r\nPING\r\n", len(hdr), len(hdr)+1, hdr)
	if l, err := r.ReadString('\n'); err != nil || l != "PONG\r\n" {
		t.Fatalf("raw request: %q, %v", l, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		for _, e := range logs.FilterMessage("nats: asynchronous error").All() {
			f := e.ContextMap()
			if e.Level != zap.WarnLevel || f["connection"] != "roompub-publisher" || !strings.HasPrefix(fmt.Sprint(f["subject"]), "roompub.v1.") ||
				!strings.Contains(fmt.Sprint(f["error"]), "could not decode headers") {
				t.Fatalf("logged %s %v", e.Level, f)
			}
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no asynchronous error logged; warnings: %v", logs.All())
}
