package faults

import (
	"io"
	"net"
	"sync"
	"testing"
)

// routeProxy stands in front of one nats-server's route port. It has one
// listening port per peer, and each peer's routes name its own port, so
// the proxy knows who is on the other end of every connection: routes are
// dialled by both sides and deduplicated, so cutting a server off means
// cutting the connections it dialled as well as those dialled to it.
type routeProxy struct {
	t      *testing.T
	target string // the server's route listen address
	mu     sync.Mutex
	links  map[int]*proxyLink // by the peer that dials through it
}

// proxyLink forwards one peer's route connections to the target.
type proxyLink struct {
	ln    net.Listener
	from  int // the dialling peer
	to    int // the server behind the proxy
	cut   bool
	conns map[net.Conn]struct{}
}

func newRouteProxy(t *testing.T, to int, target string, peers []int) *routeProxy {
	t.Helper()
	p := &routeProxy{t: t, target: target, links: map[int]*proxyLink{}}
	for _, from := range peers {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		l := &proxyLink{ln: ln, from: from, to: to, conns: map[net.Conn]struct{}{}}
		p.links[from] = l
		go p.accept(l)
	}
	t.Cleanup(p.close)
	return p
}

// addr is the address peer from dials to reach the server behind p.
func (p *routeProxy) addr(from int) string { return p.links[from].ln.Addr().String() }

func (p *routeProxy) accept(l *proxyLink) {
	for {
		in, err := l.ln.Accept()
		if err != nil {
			return // closed
		}
		p.mu.Lock()
		cut := l.cut
		if !cut {
			l.conns[in] = struct{}{}
		}
		p.mu.Unlock()
		if cut {
			_ = in.Close()
			continue
		}
		go p.forward(l, in)
	}
}

func (p *routeProxy) forward(l *proxyLink, in net.Conn) {
	out, err := net.Dial("tcp", p.target)
	if err != nil {
		p.drop(l, in)
		_ = in.Close()
		return
	}
	p.mu.Lock()
	if l.cut {
		p.mu.Unlock()
		_ = in.Close()
		_ = out.Close()
		return
	}
	l.conns[out] = struct{}{}
	p.mu.Unlock()
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		done <- struct{}{}
	}
	go pipe(out, in)
	go pipe(in, out)
	<-done
	_ = in.Close()
	_ = out.Close()
	<-done
	p.drop(l, in, out)
}

func (p *routeProxy) drop(l *proxyLink, cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		delete(l.conns, c)
	}
}

// setCut cuts (or heals) every link that involves server n: its own
// proxy's links and the links of this proxy that n dials through.
func (p *routeProxy) setCut(n int, cut bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, l := range p.links {
		if l.from != n && l.to != n {
			continue
		}
		l.cut = cut
		if cut {
			for c := range l.conns {
				_ = c.Close()
			}
			clear(l.conns)
		}
	}
}

func (p *routeProxy) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, l := range p.links {
		_ = l.ln.Close()
		l.cut = true
		for c := range l.conns {
			_ = c.Close()
		}
	}
}
