// Package embedded runs a real nats-server in process, with JetStream on
// disk and an fsync before every acknowledgement by default: the server
// `publisher serve` starts when no --server is given, and the one tests
// start. It imports no roompub package (docs/design.md, "Package map and
// import rules").
package embedded

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"go.uber.org/zap"
)

// ErrServer is wrapped by Start.
var ErrServer = errors.New("embedded nats-server")

// Options configures the embedded nats-server. The zero value
// listens on 127.0.0.1:4222 and keeps JetStream in ./data with an fsync
// before every acknowledgement.
type Options struct {
	// Listen is host:port for clients; port -1 picks a free port (tests).
	// Default 127.0.0.1:4222.
	Listen string
	// StoreDir is the JetStream store directory. Default ./data.
	StoreDir string
	// SyncInterval is how often JetStream fsyncs. Zero, the default, means
	// before every acknowledgement (sync_interval: always), so acknowledged
	// means on disk. A positive value trades that away for speed.
	SyncInterval time.Duration
	// MaxPayload is the largest message the server accepts, in bytes;
	// 0 keeps the server default (1 MiB).
	MaxPayload int32
	// MaxFileStore caps the JetStream file store in bytes; 0 = no cap
	// beyond the disk.
	MaxFileStore int64
	// Logger receives the server's log lines; nil discards them.
	Logger *zap.Logger
	// ServerName names the server in logs and cluster views.
	// Default "roompub-embedded".
	ServerName string
	// Configure, when set, may adjust the server options last (tests,
	// secure mode). It must not turn JetStream off.
	Configure func(*server.Options)
}

// Server is a running in-process nats-server with JetStream on disk.
type Server struct {
	srv  *server.Server
	dir  string   // the JetStream store directory
	lock *os.File // holds the store directory's lock (lockStore); nil where there is none
}

// Start starts the server and waits until it accepts clients.
// It locks the store directory first (lockStore): a second server on a
// store in use fails to start. Errors wrap ErrServer.
func Start(o Options) (*Server, error) {
	listen := o.Listen
	if listen == "" {
		listen = "127.0.0.1:4222"
	}
	host, portStr, err := net.SplitHostPort(listen)
	if err != nil {
		return nil, fmt.Errorf("%w: listen %q: %v", ErrServer, listen, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return nil, fmt.Errorf("%w: listen %q: bad port", ErrServer, listen)
	}
	opts := &server.Options{
		ServerName:         o.ServerName,
		Host:               host,
		Port:               port,
		JetStream:          true,
		StoreDir:           o.StoreDir,
		JetStreamMaxStore:  o.MaxFileStore,
		JetStreamMaxMemory: 64 << 20,
		MaxPayload:         o.MaxPayload,
		NoSigs:             true,
	}
	if opts.ServerName == "" {
		opts.ServerName = "roompub-embedded"
	}
	if opts.StoreDir == "" {
		opts.StoreDir = "./data"
	}
	if o.SyncInterval > 0 {
		opts.SyncInterval = o.SyncInterval
	} else {
		opts.SyncAlways = true
		opts.SyncInterval = 2 * time.Minute // unused with SyncAlways; the server's default
	}
	if o.Configure != nil {
		o.Configure(opts)
	}
	if !opts.JetStream {
		return nil, fmt.Errorf("%w: JetStream must stay on", ErrServer)
	}
	lock, err := lockStore(opts.StoreDir)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrServer, err)
	}
	started := false
	defer func() {
		if !started && lock != nil {
			lock.Close()
		}
	}()
	srv, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrServer, err)
	}
	zl := o.Logger
	if zl == nil {
		zl = zap.NewNop()
	}
	var fatal atomic.Pointer[string]
	srv.SetLoggerV2(zapServerLogger{l: zl.Sugar().Named("nats-server"), fatal: &fatal}, false, false, false)
	srv.Start()
	if f := fatal.Load(); f != nil {
		// The server could not start (a JetStream store it cannot write):
		// say why now rather than wait for a listener that never comes.
		srv.Shutdown()
		return nil, fmt.Errorf("%w: %s", ErrServer, *f)
	}
	if !srv.ReadyForConnections(30 * time.Second) {
		srv.Shutdown()
		return nil, fmt.Errorf("%w: not ready for connections after 30s", ErrServer)
	}
	started = true
	return &Server{srv: srv, dir: opts.StoreDir, lock: lock}, nil
}

// LockStore takes the lock of store directory dir that Start takes,
// without starting a server: for a command that reads the store's files
// itself (copies them) and must not race a server starting on them. The
// returned function releases it. Errors wrap ErrServer, as Start's: a
// store a running server holds is refused the same way.
func LockStore(dir string) (unlock func(), err error) {
	f, err := lockStore(dir)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrServer, err)
	}
	return func() {
		if f != nil {
			f.Close()
		}
	}, nil
}

// ClientURL is the nats:// URL clients connect to.
func (e *Server) ClientURL() string { return e.srv.ClientURL() }

// StoreDir is the JetStream store directory the server holds (locked).
func (e *Server) StoreDir() string { return e.dir }

// NATSServer exposes the underlying server (tests, monitoring).
func (e *Server) NATSServer() *server.Server { return e.srv }

// Shutdown stops the server and waits until it has stopped; JetStream
// flushes and closes its store first.
func (e *Server) Shutdown() {
	e.srv.Shutdown()
	e.srv.WaitForShutdown()
	if e.lock != nil {
		e.lock.Close() // the store is free for the next server
		e.lock = nil
	}
}

// zapServerLogger adapts zap to the nats-server logger interface. It keeps
// the first fatal line: the server reports a failed start only there.
type zapServerLogger struct {
	l     *zap.SugaredLogger
	fatal *atomic.Pointer[string]
}

func (z zapServerLogger) Noticef(format string, v ...any) { z.l.Debugf(format, v...) }
func (z zapServerLogger) Warnf(format string, v ...any)   { z.l.Warnf(format, v...) }
func (z zapServerLogger) Fatalf(format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	z.fatal.CompareAndSwap(nil, &msg)
	z.l.Error(msg)
}
func (z zapServerLogger) Errorf(format string, v ...any) { z.l.Errorf(format, v...) }
func (z zapServerLogger) Debugf(format string, v ...any) { z.l.Debugf(format, v...) }
func (z zapServerLogger) Tracef(format string, v ...any) { z.l.Debugf(format, v...) }
