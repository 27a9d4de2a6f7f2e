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

// HeaderAddingUp is a stored header block that forges the headers a
// direct get appends: its part nats.go reads (up to a blank line) holds
// forged, as "K:V" lines ending in a bare LF, padded with "a:" lines so
// that, read canonically, they are as long as the reply's whole header,
// the server's lines server included. A reader that only sums lengths
// takes the forged values for the server's.
func HeaderAddingUp(forged, server [][2]string) string {
	var b strings.Builder
	b.WriteString("NATS/1.0\r\n")
	n := len("NATS/1.0\r\n\r\n")
	for _, kv := range forged {
		fmt.Fprintf(&b, "%s:%s\n", kv[0], kv[1])
		n += len(kv[0]) + 4 + len(kv[1])
	}
	ls := 0
	for _, kv := range server {
		ls += len(kv[0]) + 4 + len(kv[1])
	}
	for {
		switch d := b.Len() + 4 + ls - n; {
		case d == 0:
			b.WriteString("\r\n\r\n")
			return b.String()
		case d == 1:
			b.WriteString("a: \n")
		default:
			b.WriteString("a:\n")
		}
		n += 5
	}
}
