// Command mkdeb builds ztpd's Debian package (make package):
//
//	go run ./internal/packaging/mkdeb --version 1.2.0 --arch amd64 \
//	    --binary dist/build/ztpd --man dist/build/man --completions dist/build/completions \
//	    --examples examples/profiles --out dist
package main

import (
	"flag"
	"fmt"
	"os"
	"runtime"

	"github.com/ztpd/ztpd/internal/packaging"
)

func main() {
	var o packaging.Options
	flag.StringVar(&o.Version, "version", "", "Debian package version, e.g. 1.2.0 or 0.0.0~git20261203.7145c11")
	flag.StringVar(&o.Arch, "arch", runtime.GOARCH, "Go architecture the binary was built for")
	flag.StringVar(&o.Binary, "binary", "", "the ztpd binary")
	flag.StringVar(&o.ManDir, "man", "", "man pages from ztpd gendocs --man")
	flag.StringVar(&o.CompletionsDir, "completions", "", "completions from ztpd gendocs --completions")
	flag.StringVar(&o.ExamplesDir, "examples", "", "example profiles to ship in /usr/share/doc/ztpd/examples/profiles")
	flag.StringVar(&o.OutDir, "out", "dist", "output directory")
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "mkdeb: unexpected argument %q\n", flag.Arg(0))
		os.Exit(2)
	}
	path, err := packaging.BuildDeb(o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "mkdeb:", err)
		os.Exit(1)
	}
	fmt.Println(path)
}
