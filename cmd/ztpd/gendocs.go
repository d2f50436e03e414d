package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
)

func init() { register(newGendocsCmd) }

// gendocs writes the man pages and shell completions that the package
// (make package) installs. It is hidden: operators read its output, they do
// not run it. Both come from the live command tree, so they never drift from
// what --help says.
func newGendocsCmd(_ *rootOptions) *cobra.Command {
	var manDir, complDir string
	cmd := &cobra.Command{
		Use:    "gendocs --man DIR --completions DIR",
		Short:  "Write man pages (section 1) and bash, zsh and fish completions for packaging",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if manDir == "" && complDir == "" {
				return errors.New("give --man DIR, --completions DIR or both")
			}
			root := cmd.Root()
			if manDir != "" {
				if err := os.MkdirAll(manDir, 0o755); err != nil {
					return err
				}
				// cobra takes the date from SOURCE_DATE_EPOCH when set, so
				// a package build can be reproducible.
				hdr := &doc.GenManHeader{Section: "1", Source: "ztpd " + version, Manual: "ztpd manual"}
				if err := doc.GenManTree(root, hdr, manDir); err != nil {
					return fmt.Errorf("man pages: %w", err)
				}
			}
			if complDir != "" {
				return gendocsCompletions(root, complDir)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&manDir, "man", "", "write one man page per command (ztpd.1, ztpd-serve.1, ...) into this directory")
	cmd.Flags().StringVar(&complDir, "completions", "", "write ztpd.bash, _ztpd (zsh) and ztpd.fish into this directory")
	return cmd
}

// gendocsCompletions writes the completion scripts under the names the
// package installs them as (bash-completion, zsh vendor-completions, fish
// vendor_completions.d).
func gendocsCompletions(root *cobra.Command, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, c := range []struct {
		name string
		gen  func(f *os.File) error
	}{
		{"ztpd.bash", func(f *os.File) error { return root.GenBashCompletionV2(f, true) }},
		{"_ztpd", func(f *os.File) error { return root.GenZshCompletion(f) }},
		{"ztpd.fish", func(f *os.File) error { return root.GenFishCompletion(f, true) }},
	} {
		f, err := os.Create(filepath.Join(dir, c.name))
		if err != nil {
			return err
		}
		err = c.gen(f)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("completion %s: %w", c.name, err)
		}
	}
	return nil
}
