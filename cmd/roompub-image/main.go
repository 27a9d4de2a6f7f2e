// Command roompub-image writes roompub's OCI image as an OCI image layout
// directory, offline (ociimage.Write), and prints its digest. `make
// image` builds the static commands and runs it:
//
//	roompub-image --out bin/image --publisher P --subscriber S \
//	    --image-version v1.2.3 --created-unix 1767225600
//
// Exit status: 0 when the layout is written, 2 otherwise.
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/alecthomas/kong"

	"github.com/roompub/roompub/internal/ociimage"
)

// cli is the command line grammar: the layout directory and one flag per
// ociimage.Options field.
type cli struct {
	Out          string `required:"" placeholder:"DIR" help:"OCI image layout directory to write (must be missing or empty)."`
	Publisher    string `required:"" type:"existingfile" placeholder:"FILE" help:"The publisher binary: linux, CGO_ENABLED=0."`
	Subscriber   string `required:"" type:"existingfile" placeholder:"FILE" help:"The subscriber binary: linux, CGO_ENABLED=0, same architecture."`
	CACerts      string `name:"ca-certs" default:"${cacerts}" type:"existingfile" placeholder:"FILE" help:"PEM bundle of CA certificates for the image."`
	ImageVersion string `required:"" placeholder:"VERSION" help:"The org.opencontainers.image.version label: what the binaries' --version prints."`
	Source       string `default:"${source}" placeholder:"URL" help:"The org.opencontainers.image.source label."`
	CreatedUnix  int64  `name:"created-unix" env:"SOURCE_DATE_EPOCH" placeholder:"SECONDS" help:"Creation time of the image and its files, in seconds since the Unix epoch (reproducible builds: the commit's time); default 0."`
}

func main() {
	var c cli
	parser, err := kong.New(&c,
		kong.Name("roompub-image"),
		kong.Description("Write roompub's OCI image (static publisher and subscriber, CA certificates, non-root user) as an OCI image layout, offline, and print its digest."),
		kong.Vars{"cacerts": ociimage.CACertsPath, "source": ociimage.DefaultSource},
	)
	if err != nil {
		fail(err)
	}
	if _, err := parser.Parse(os.Args[1:]); err != nil {
		// Bad flags are exit 2, as for the other commands (kong's own is 80).
		parser.Errorf("%s", err)
		os.Exit(2)
	}
	digest, err := ociimage.Write(context.Background(), c.Out, ociimage.Options{
		Publisher:  c.Publisher,
		Subscriber: c.Subscriber,
		CACerts:    c.CACerts,
		Version:    c.ImageVersion,
		Source:     c.Source,
		Created:    time.Unix(c.CreatedUnix, 0),
	})
	if err != nil {
		fail(err)
	}
	fmt.Println(digest)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "roompub-image:", err)
	os.Exit(2)
}
