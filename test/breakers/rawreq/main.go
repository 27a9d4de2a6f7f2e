// Command rawreq sends one request body (a file) to a subject with headers
// and prints the reply's headers and body.
//
//	go run ./test/breakers/rawreq nats://127.0.0.1:4222 roompub.v1.journal body.ndjson Roompub-Room=room:x
package main

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
)

func main() {
	nc, err := nats.Connect(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	defer nc.Close()
	body, err := os.ReadFile(os.Args[3])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	m := nats.NewMsg(os.Args[2])
	m.Data = body
	for _, h := range os.Args[4:] {
		k, v, _ := strings.Cut(h, "=")
		m.Header.Add(k, v)
	}
	reply, err := nc.RequestMsg(m, 60*time.Second)
	if err != nil {
		fmt.Fprintln(os.Stderr, "request:", err)
		os.Exit(2)
	}
	for k, v := range reply.Header {
		fmt.Printf("header %s: %v\n", k, v)
	}
	fmt.Println(string(reply.Data))
}
