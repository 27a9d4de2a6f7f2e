package room

import (
	"errors"
	"fmt"
	"strings"
)

// Identities and replies of the ingest service (docs/secure-mode.md,
// "Identities and replies").
//
// Every request names the identity that sends it in its subject:
// <prefix>.<identity>.<endpoint>, where <identity> is IdentityToken of the
// NATS user (its name, or its public nkey). Secure mode lets each user
// publish on its own identity's subjects only, so the subject tells the
// service who asks without trusting anything in the request. Requests on
// <prefix>.<endpoint>, with no identity, come from the anonymous identity:
// the only one in the unauthenticated default mode, and no one's in secure
// mode.
//
// The service answers a request only on a reply subject under the
// identity's own inbox prefix (InboxPrefix), which secure mode lets that
// user alone subscribe to and the publisher alone publish to. A reply
// anywhere else could act in the service's name: a JetStream API call, a
// room subject, a key of the lease bucket, another user's inbox.

// Anonymous is the identity of requests whose subject names none
// (<prefix>.<endpoint>).
const Anonymous = ""

// DefaultInboxPrefix is the inbox prefix of the anonymous identity: nats.go's
// default.
const DefaultInboxPrefix = "_INBOX"

// ErrServiceSubject is wrapped by ParseServiceSubject.
var ErrServiceSubject = errors.New("not an ingest service subject")

// The ingest service's endpoints, the last token of their subjects.
const (
	EndpointJournal   = "journal"
	EndpointExecution = "execution"
	EndpointRecords   = "records"
	EndpointHead      = "head"
)

// Endpoints lists the ingest service's endpoints.
var Endpoints = []string{EndpointJournal, EndpointExecution, EndpointRecords, EndpointHead}

// IdentityToken is the subject token of the NATS user named id (a user
// name, or a public nkey, which stands for itself): EncodeToken of it, so
// every user has its own token and no token holds '.', '*' or '>'.
// Anonymous stays Anonymous.
func IdentityToken(id string) string {
	if id == Anonymous {
		return Anonymous
	}
	return EncodeToken(id)
}

// InboxPrefix is the inbox prefix of an identity token: "_INBOX_" + token,
// or DefaultInboxPrefix for Anonymous. Its clients connect with it
// (nats.CustomInboxPrefix), and secure mode lets the user alone subscribe
// under it.
func InboxPrefix(token string) string {
	if token == Anonymous {
		return DefaultInboxPrefix
	}
	return DefaultInboxPrefix + "_" + token
}

// ServiceSubject is the subject of endpoint for identity token (Anonymous:
// <prefix>.<endpoint>). prefix "" is DefaultServicePrefix.
func ServiceSubject(prefix, token, endpoint string) string {
	if prefix == "" {
		prefix = DefaultServicePrefix
	}
	if token == Anonymous {
		return prefix + "." + endpoint
	}
	return prefix + "." + token + "." + endpoint
}

// ParseServiceSubject returns the identity token and endpoint of an ingest
// subject under prefix: <prefix>.<endpoint> (Anonymous) or
// <prefix>.<token>.<endpoint>, the token one that IdentityToken can make
// and the endpoint one of Endpoints. Errors wrap ErrServiceSubject.
func ParseServiceSubject(prefix, subject string) (token, endpoint string, err error) {
	if prefix == "" {
		prefix = DefaultServicePrefix
	}
	rest, ok := strings.CutPrefix(subject, prefix+".")
	if !ok {
		return "", "", fmt.Errorf("%w: %q is not under %s", ErrServiceSubject, ClipSubject(subject), prefix)
	}
	if i := strings.IndexByte(rest, '.'); i >= 0 {
		token, rest = rest[:i], rest[i+1:]
		id, derr := DecodeToken(token)
		if derr != nil || id == "" {
			return "", "", fmt.Errorf("%w: identity token %q of %q", ErrServiceSubject, ClipSubject(token), ClipSubject(subject))
		}
	}
	for _, e := range Endpoints {
		if rest == e {
			return token, e, nil
		}
	}
	return "", "", fmt.Errorf("%w: %q names no endpoint", ErrServiceSubject, ClipSubject(subject))
}

// CheckReply reports whether reply is a subject the service may answer a
// request of identity token on: under InboxPrefix(token) + ".", with at
// least one more token, each token non-empty and free of wildcards and
// white space. The anonymous identity, which has no user of its own, may
// name any inbox prefix (a first token starting with "_INBOX"), as nats.go
// clients with a custom inbox prefix do; never a JetStream API, key-value
// or room subject. nil when it may; otherwise why not.
func CheckReply(token, reply string) error {
	if reply == "" {
		return errors.New("the request has no reply subject")
	}
	inbox := InboxPrefix(token) + "."
	if token == Anonymous {
		if i := strings.IndexByte(reply, '.'); i > 0 && strings.HasPrefix(reply, DefaultInboxPrefix) {
			inbox = reply[:i+1]
		}
	}
	if !strings.HasPrefix(reply, inbox) || len(reply) == len(inbox) {
		return fmt.Errorf("reply subject %q is not under the inbox %s of identity %s", ClipSubject(reply), inbox+">", IdentityName(token))
	}
	for _, tok := range strings.Split(reply, ".") {
		if tok == "" || tok == "*" || tok == ">" || strings.ContainsAny(tok, " \t\r\n") {
			return fmt.Errorf("reply subject %q is not a plain subject", ClipSubject(reply))
		}
	}
	return nil
}

// IdentityName names an identity token in messages and refusals:
// Anonymous as "(anonymous)", any other token as itself.
func IdentityName(token string) string {
	if token == Anonymous {
		return "(anonymous)"
	}
	return token
}

// ClipSubject keeps a subject quoted in an error or a log short: at most
// 200 bytes and an ellipsis (a subject may be up to the server's limit,
// and a hostile one must not flood a log).
func ClipSubject(s string) string {
	if len(s) > 200 {
		return s[:200] + "…"
	}
	return s
}
