package roomtest

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// PublishRawHeader stores data on subject with hdr, a header block sent
// byte for byte as given (one nats.go would never write: a blank line
// inside it, say), on a connection of its own to nc's server, and returns
// the stream seq of the message: what a stray client with the right to
// publish on the subject can store.
func PublishRawHeader(t testing.TB, nc *nats.Conn, subject, hdr string, data []byte) uint64 {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(nc.ConnectedUrl(), "nats://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	r := bufio.NewReader(c)
	if _, err := r.ReadString('\n'); err != nil { // INFO
		t.Fatal(err)
	}
	fmt.Fprintf(c, "CONNECT {\"verbose\":false,\"headers\":true,\"protocol\":1}\r\nSUB _INBOX.raw 1\r\nHPUB %s _INBOX.raw %d %d\r\n%s%s\r\nPING\r\n",
		subject, len(hdr), len(hdr)+len(data), hdr, data)
	for {
		l, err := r.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(l, "MSG") {
			continue
		}
		ack, _ := r.ReadString('\n')
		var a struct {
			Seq uint64 `json:"seq"`
		}
		if err := json.Unmarshal([]byte(ack), &a); err != nil || a.Seq == 0 {
			t.Fatalf("%s not stored: %s", subject, ack)
		}
		return a.Seq
	}
}
