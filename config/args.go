package config

import (
	"strings"

	"github.com/alecthomas/kong"
)

// flagsFirst returns args with the positional arguments moved behind the
// flags, after a "--", so that flags may stand anywhere among them. kong
// fills a positional slice (`arg:""` on a []string) from the value tokens
// that follow one another only: a flag ends it, and the positional token
// after that flag finds no argument left ("unexpected argument"). So
// "verify A --json B" is given to kong as "verify --json -- A B". A "--" in
// args still ends the flags: every token after it is a positional
// argument. Command names and flags keep their order.
//
// Whatever flagsFirst cannot tell for sure (an unknown flag, a flag
// without its value, a positional argument where the command takes none, a
// passthrough argument, a default command) leaves args as they are, for
// kong to parse and report.
func flagsFirst(app *kong.Application, args []string) []string {
	node := app.Node
	var flags, positional []string
	for i := 0; i < len(args); i++ {
		if !plainNode(node) {
			return args
		}
		a := args[i]
		switch {
		case a == "--":
			positional = append(positional, args[i+1:]...)
			i = len(args)
		case strings.HasPrefix(a, "--"):
			name, _, inline := strings.Cut(a[2:], "=")
			f := longFlag(node, name)
			if f == nil {
				return args
			}
			flags = append(flags, a)
			if takesValue(f) && !inline {
				if i+1 == len(args) {
					return args
				}
				i++
				flags = append(flags, args[i])
			}
		case strings.HasPrefix(a, "-") && a != "-":
			valueNext, ok := shortFlags(node, a[1:])
			if !ok {
				return args
			}
			flags = append(flags, a)
			if valueNext {
				if i+1 == len(args) {
					return args
				}
				i++
				flags = append(flags, args[i])
			}
		default:
			if child := childCommand(node, a); child != nil && len(positional) == 0 {
				node = child
				flags = append(flags, a)
				continue
			}
			if len(node.Positional) == 0 {
				return args
			}
			positional = append(positional, a)
		}
	}
	if len(positional) == 0 {
		return args
	}
	out := make([]string, 0, len(flags)+1+len(positional))
	out = append(out, flags...)
	out = append(out, "--")
	return append(out, positional...)
}

// plainNode reports whether flagsFirst knows how kong parses n's tokens: no
// default command, no passthrough, no argument branches.
func plainNode(n *kong.Node) bool {
	if n.DefaultCmd != nil || n.Passthrough {
		return false
	}
	for _, p := range n.Positional {
		if p.PassthroughMode != kong.PassThroughModeNone {
			return false
		}
	}
	for _, c := range n.Children {
		if c.Type != kong.CommandNode {
			return false
		}
	}
	return true
}

// childCommand is n's subcommand named (or aliased) name, or nil.
func childCommand(n *kong.Node, name string) *kong.Node {
	for _, c := range n.Children {
		if c.Name == name {
			return c
		}
	}
	for _, c := range n.Children {
		for _, alias := range c.Aliases {
			if alias == name {
				return c
			}
		}
	}
	return nil
}

// longFlag is the flag of n or its parents that --name (or a negation of
// it) names, or nil.
func longFlag(n *kong.Node, name string) *kong.Flag {
	for ; n != nil; n = n.Parent {
		for _, f := range n.Flags {
			if f.Name == name || negation(f) == name {
				return f
			}
			for _, alias := range f.Aliases {
				if len([]rune(alias)) > 1 && alias == name {
					return f
				}
			}
		}
	}
	return nil
}

// negation is the name that negates f ("no-json" for a negatable --json),
// or "".
func negation(f *kong.Flag) string {
	switch f.Tag.Negatable {
	case "":
		return ""
	case "_": // kong's default: no-<name>
		return "no-" + f.Name
	default:
		return f.Tag.Negatable
	}
}

// shortFlag is the flag of n or its parents that -r names, or nil.
func shortFlag(n *kong.Node, r rune) *kong.Flag {
	for ; n != nil; n = n.Parent {
		for _, f := range n.Flags {
			if f.Short == r {
				return f
			}
			for _, alias := range f.Aliases {
				if alias == string(r) {
					return f
				}
			}
		}
	}
	return nil
}

// shortFlags reads the short flags of one token without its "-": each
// flag up to the first that takes a value, whose value is the rest of the
// token or, when that is empty, the next argument (valueNext). ok is
// false when a letter names no flag.
func shortFlags(n *kong.Node, letters string) (valueNext, ok bool) {
	for i, r := range letters {
		f := shortFlag(n, r)
		if f == nil {
			return false, false
		}
		if takesValue(f) {
			return i+len(string(r)) == len(letters), true
		}
	}
	return false, true
}

// takesValue reports whether f takes the next argument as its value when
// it is given without "=value": every flag but booleans and counters.
func takesValue(f *kong.Flag) bool {
	return !f.IsBool() && !f.IsCounter()
}
