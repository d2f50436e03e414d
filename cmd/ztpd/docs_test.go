package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"unicode"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"

	"github.com/ztpd/ztpd/internal/config"
	"github.com/ztpd/ztpd/internal/ha"
)

// The README and docs/ are read by operators who type what they show, so
// they are checked against the binary: links resolve, every command and
// flag shown exists, the configuration reference states the code's
// defaults, and the sample answers shown are the answers ztpd gives.

// repoRoot is where README.md lives, seen from this package's directory.
const repoRoot = "../.."

// docFile is one markdown file, split into what is code and what is prose.
type docFile struct {
	rel   string   // path from the repository root
	lines []string // the file's lines
	code  []bool   // per line: inside a fenced or indented code block
}

func docFiles(t *testing.T) []*docFile {
	t.Helper()
	names := []string{"README.md", "ARCHITECTURE.md", "examples/profiles/README.md"}
	pages, err := filepath.Glob(filepath.Join(repoRoot, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	if len(pages) == 0 {
		t.Fatal("docs/*.md: no pages")
	}
	for _, p := range pages {
		names = append(names, filepath.ToSlash(strings.TrimPrefix(p, repoRoot+string(filepath.Separator))))
	}
	var files []*docFile
	for _, n := range names {
		b, err := os.ReadFile(filepath.Join(repoRoot, n))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, parseDoc(n, string(b)))
	}
	return files
}

func parseDoc(rel, text string) *docFile {
	f := &docFile{rel: rel, lines: strings.Split(text, "\n")}
	f.code = make([]bool, len(f.lines))
	fence := ""
	prevBlank, inIndented := true, false
	for i, l := range f.lines {
		trim := strings.TrimSpace(l)
		switch {
		case fence != "":
			f.code[i] = true
			if strings.HasPrefix(trim, fence) {
				fence = ""
			}
		case strings.HasPrefix(trim, "```") || strings.HasPrefix(trim, "~~~"):
			fence = trim[:3]
			f.code[i] = true
		case trim != "" && strings.HasPrefix(l, "    ") && (prevBlank || inIndented) && !inList(f.lines, i):
			// An indented code block: four spaces after a blank line, not
			// the continuation of a list item.
			f.code[i] = true
			inIndented = true
		case trim != "":
			inIndented = false
		}
		prevBlank = trim == ""
	}
	return f
}

// inList says whether line i continues a list item: the nearest line above
// it with less indentation is a list item.
func inList(lines []string, i int) bool {
	ind := len(lines[i]) - len(strings.TrimLeft(lines[i], " "))
	for j := i - 1; j >= 0; j-- {
		l := lines[j]
		if strings.TrimSpace(l) == "" {
			continue
		}
		if lind := len(l) - len(strings.TrimLeft(l, " ")); lind < ind {
			return listItem.MatchString(l)
		}
	}
	return false
}

var listItem = regexp.MustCompile(`^\s*([-*+]|\d+\.)\s`)

// prose is the file's text with code blocks blanked (line numbers kept).
func (f *docFile) prose() string {
	out := make([]string, len(f.lines))
	for i, l := range f.lines {
		if !f.code[i] {
			out[i] = l
		}
	}
	return strings.Join(out, "\n")
}

// lineOf is the 1-based line of byte offset off in text.
func lineOf(text string, off int) int { return strings.Count(text[:off], "\n") + 1 }

// anchors are the heading anchors GitHub makes for a markdown file.
func (f *docFile) anchors() map[string]bool {
	seen := map[string]int{}
	out := map[string]bool{}
	for i, l := range f.lines {
		if f.code[i] || !strings.HasPrefix(l, "#") {
			continue
		}
		h := strings.TrimLeft(l, "#")
		if !strings.HasPrefix(h, " ") {
			continue
		}
		s := slug(strings.TrimSpace(h))
		if n := seen[s]; n > 0 {
			out[fmt.Sprintf("%s-%d", s, n)] = true
		} else {
			out[s] = true
		}
		seen[s]++
	}
	return out
}

// slug is GitHub's heading anchor: lower case, punctuation dropped except
// '-' and '_', each space a '-'.
func slug(h string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}

var (
	mdLink     = regexp.MustCompile(`!?\[[^\]]*\]\(([^)\s]+)\)`)
	inlineCode = regexp.MustCompile("`[^`]+`")
)

func TestDocLinksResolve(t *testing.T) {
	files := docFiles(t)
	byRel := map[string]*docFile{}
	for _, f := range files {
		byRel[f.rel] = f
	}
	checked := 0
	for _, f := range files {
		text := f.prose()
		// Links inside inline code are text, not links.
		text = inlineCode.ReplaceAllStringFunc(text, func(s string) string { return strings.Repeat(" ", len(s)) })
		for _, m := range mdLink.FindAllStringSubmatchIndex(text, -1) {
			target := text[m[2]:m[3]]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			checked++
			at := fmt.Sprintf("%s:%d: link %q", f.rel, lineOf(text, m[0]), target)
			path, anchor, _ := strings.Cut(target, "#")
			dest := f.rel
			if path != "" {
				dest = filepath.ToSlash(filepath.Clean(filepath.Join(filepath.Dir(f.rel), path)))
				if strings.HasPrefix(dest, "../") {
					t.Errorf("%s leaves the repository", at)
					continue
				}
				if _, err := os.Stat(filepath.Join(repoRoot, dest)); err != nil {
					t.Errorf("%s: %s does not exist", at, dest)
					continue
				}
			}
			if anchor == "" {
				continue
			}
			df := byRel[dest]
			if df == nil {
				if !strings.HasSuffix(dest, ".md") {
					t.Errorf("%s: an anchor into %s, which is not markdown", at, dest)
					continue
				}
				b, err := os.ReadFile(filepath.Join(repoRoot, dest))
				if err != nil {
					t.Errorf("%s: %v", at, err)
					continue
				}
				df = parseDoc(dest, string(b))
			}
			if !df.anchors()[anchor] {
				t.Errorf("%s: %s has no heading with anchor #%s", at, dest, anchor)
			}
		}
	}
	if checked < 20 {
		t.Errorf("only %d relative links found: is the link pattern broken?", checked)
	}
}

// shownCommand is a ztpd command line a document shows.
type shownCommand struct {
	at    string // file:line
	words []string
}

// ztpdNames are the ways a document names the binary.
var ztpdNames = map[string]bool{"ztpd": true, "/usr/bin/ztpd": true, "bin/ztpd": true, "./cmd/ztpd": true}

// commandWords returns the words of the ztpd command a shell line runs
// ("$ sudo ztpd device list", "sudo -u ztpd ztpd apikey create",
// "go run ./cmd/ztpd serve"), or nil when it runs none.
func commandWords(line string) []string {
	w := strings.Fields(line)
	for len(w) > 0 {
		switch {
		case w[0] == "$":
			w = w[1:]
		case w[0] == "sudo":
			w = w[1:]
			for len(w) > 0 && strings.HasPrefix(w[0], "-") {
				if w[0] == "-u" && len(w) > 1 {
					w = w[1:]
				}
				w = w[1:]
			}
		case w[0] == "go" && len(w) > 1 && w[1] == "run":
			w = w[2:]
		case w[0] == "setpriv":
			// setpriv OPTIONS -- COMMAND
			i := slices.Index(w, "--")
			if i < 0 {
				return nil
			}
			w = w[i+1:]
		case ztpdNames[w[0]]:
			return w
		default:
			return nil
		}
	}
	return nil
}

// shownCommands collects the ztpd commands in code blocks (each shell line,
// continuation lines joined, split at ';' and '&&') and in inline code
// spans of the prose.
func shownCommands(files []*docFile) []shownCommand {
	var out []shownCommand
	for _, f := range files {
		// In a block that shows prompts ("$ ztpd ..."), the lines without
		// one are the commands' output, not commands.
		prompted := make([]bool, len(f.lines))
		for i := 0; i < len(f.lines); {
			j := i
			has := false
			for ; j < len(f.lines) && f.code[j] == f.code[i]; j++ {
				has = has || strings.HasPrefix(strings.TrimSpace(f.lines[j]), "$ ")
			}
			for k := i; k < j; k++ {
				prompted[k] = f.code[i] && has
			}
			i = j
		}
		for i := 0; i < len(f.lines); i++ {
			if !f.code[i] || prompted[i] && !strings.HasPrefix(strings.TrimSpace(f.lines[i]), "$ ") {
				continue
			}
			start, line := i, f.lines[i]
			for strings.HasSuffix(line, "\\") && i+1 < len(f.lines) && f.code[i+1] {
				i++
				line = strings.TrimSuffix(line, "\\") + " " + f.lines[i]
			}
			for _, seg := range regexp.MustCompile(`;\s|&&`).Split(line, -1) {
				if w := commandWords(seg); w != nil {
					out = append(out, shownCommand{fmt.Sprintf("%s:%d", f.rel, start+1), w})
				}
			}
		}
		text := f.prose()
		for _, m := range inlineCode.FindAllStringIndex(text, -1) {
			span := strings.Trim(text[m[0]:m[1]], "`")
			// A table cell escapes the pipes of alternatives.
			span = strings.ReplaceAll(span, `\|`, "|")
			if w := commandWords(span); w != nil && !notCommands[span] {
				out = append(out, shownCommand{fmt.Sprintf("%s:%d", f.rel, lineOf(text, m[0])), w})
			}
		}
	}
	return out
}

// shownMistakes are command lines the docs show on purpose to show the
// error they get.
var shownMistakes = map[string]bool{"ztpd cluster craete": true}

// notCommands are inline code spans that begin with "ztpd " and are no
// command: a log message, the key fingerprint's hash prefix.
var notCommands = map[string]bool{"ztpd started": true, "ztpd keyring id v1": true}

// lookupFlag finds a flag by "--name" or "-x" on cmd, its persistent
// flags or those it inherits.
func lookupFlag(cmd *cobra.Command, tok string) *pflag.Flag {
	if tok == "--help" || tok == "-h" {
		return &pflag.Flag{Name: "help", Value: newBoolValue()}
	}
	for _, fs := range []*pflag.FlagSet{cmd.Flags(), cmd.PersistentFlags(), cmd.InheritedFlags()} {
		var f *pflag.Flag
		if name, ok := strings.CutPrefix(tok, "--"); ok {
			f = fs.Lookup(name)
		} else if len(tok) == 2 {
			f = fs.ShorthandLookup(tok[1:])
		}
		if f != nil {
			return f
		}
	}
	return nil
}

type boolValue bool

func newBoolValue() *boolValue          { b := boolValue(false); return &b }
func (b *boolValue) String() string     { return fmt.Sprint(bool(*b)) }
func (b *boolValue) Set(s string) error { *b = s == "true"; return nil }
func (b *boolValue) Type() string       { return "bool" }
func (b *boolValue) IsBoolFlag() bool   { return true }
func takesValue(f *pflag.Flag) bool     { return f.Value.Type() != "bool" && f.NoOptDefVal == "" }
func isStop(tok string) bool {
	return strings.ContainsAny(tok[:1], "#|<>(") || tok == "..." || tok == "2>&1"
}
func cleanWord(tok string) string { return strings.Trim(tok, "[],`") }
func cmdPaths(cs []*cobra.Command) string {
	var p []string
	for _, c := range cs {
		p = append(p, c.CommandPath())
	}
	return strings.Join(p, ", ")
}

// checkCommand walks the command tree along the words: every subcommand
// must exist ("a|b" names alternatives, each checked), and every flag must
// belong to the command reached (or be inherited).
func checkCommand(root *cobra.Command, sc shownCommand) []string {
	var errs []string
	cands := []*cobra.Command{root}
	args := false
	words := sc.words[1:]
	path := "ztpd"
	for i := 0; i < len(words); i++ {
		tok := cleanWord(words[i])
		if tok == "" {
			continue
		}
		if isStop(tok) {
			break
		}
		if strings.HasPrefix(tok, "-") && tok != "-" {
			name, _, hasValue := strings.Cut(tok, "=")
			var f *pflag.Flag
			for _, c := range cands {
				if f = lookupFlag(c, name); f != nil {
					break
				}
			}
			if f == nil {
				errs = append(errs, fmt.Sprintf("%s: %q: %s has no flag %s", sc.at, strings.Join(sc.words, " "), cmdPaths(cands), name))
				continue
			}
			if !hasValue && takesValue(f) {
				i++
			}
			continue
		}
		if args || !cands[0].HasSubCommands() {
			args = true
			continue
		}
		var next []*cobra.Command
		unknown := ""
		for _, alt := range strings.Split(tok, "|") {
			if c := findSub(cands[0], alt); c != nil && (!c.Hidden || c.Name() == "gendocs") {
				next = append(next, c)
			} else {
				unknown = alt
			}
		}
		switch {
		case unknown == "":
			cands = next
			path += " " + tok
		case len(next) == 0 && cands[0].Runnable() && cands[0].Args == nil:
			args = true
		case strings.HasPrefix(tok, "<"):
			// A placeholder (<TAB>, <command>): nothing more to check.
			return errs
		default:
			if shownMistakes[path+" "+tok] {
				return errs
			}
			errs = append(errs, fmt.Sprintf("%s: %q: %s has no subcommand %q", sc.at, strings.Join(sc.words, " "), cands[0].CommandPath(), unknown))
			return errs
		}
	}
	return errs
}

func TestDocCommandsExist(t *testing.T) {
	root := newRootCmd()
	shown := shownCommands(docFiles(t))
	if len(shown) < 50 {
		t.Fatalf("only %d ztpd commands found in the docs: is the extraction broken?", len(shown))
	}
	for _, sc := range shown {
		for _, e := range checkCommand(root, sc) {
			t.Error(e)
		}
	}
}

// The checker itself: it must refuse what does not exist.
func TestDocCommandCheckerRefusesWhatIsNotThere(t *testing.T) {
	root := newRootCmd()
	for _, line := range []string{
		"ztpd clustr list",
		"sudo ztpd device list --stat unmatched",
		"$ ztpd cluster create|lst",
		"ztpd events --folow",
		"ztpd serve --dhcp-interface veth0 --bogus",
	} {
		if errs := checkCommand(root, shownCommand{"test", commandWords(line)}); len(errs) == 0 {
			t.Errorf("%q passed the check", line)
		}
	}
	for _, line := range []string{
		"ztpd --config /etc/ztpd/ztpd.yaml backup /tmp/x --passphrase-file p",
		"sudo -u ztpd ztpd apikey create --role admin",
		"ztpd device list|show|approve|reset",
		"ztpd events [--device MAC|SERIAL] [--since 10m] [--follow] -o json",
		"go run ./cmd/ztpd serve",
		"ztpd cluster craete edge-1",
	} {
		if errs := checkCommand(root, shownCommand{"test", commandWords(line)}); len(errs) > 0 {
			t.Errorf("%q: %v", line, errs)
		}
	}
}

// configReference is the YAML block of docs/configuration.md.
func configReference(t *testing.T) (string, int) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "docs", "configuration.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	start := strings.Index(text, "```yaml\n")
	if start < 0 {
		t.Fatal("docs/configuration.md: no ```yaml block")
	}
	body := text[start+len("```yaml\n"):]
	end := strings.Index(body, "```")
	if end < 0 {
		t.Fatal("docs/configuration.md: the yaml block does not end")
	}
	return body[:end], lineOf(text, start) + 1
}

// The configuration reference is a valid configuration file, and every
// value it shows is the code's default unless its comment says it is an
// example ("e.g." or "example").
func TestDocConfigurationReferenceStatesTheDefaults(t *testing.T) {
	ref, firstLine := configReference(t)
	var whole config.Config
	dec := yaml.NewDecoder(strings.NewReader(ref))
	dec.KnownFields(true)
	if err := dec.Decode(&whole); err != nil {
		t.Fatalf("docs/configuration.md: the reference is not a configuration ztpd reads: %v", err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(ref), &doc); err != nil {
		t.Fatal(err)
	}
	want := config.Default()
	want.Validate()
	leaves := 0
	var walk func(path []string, key, val *yaml.Node)
	walk = func(path []string, key, val *yaml.Node) {
		comment := key.LineComment + " " + val.LineComment
		if strings.Contains(comment, "e.g.") || strings.Contains(comment, "example") {
			return
		}
		if val.Kind == yaml.MappingNode && val.Style&yaml.FlowStyle == 0 {
			for i := 0; i+1 < len(val.Content); i += 2 {
				walk(append(slices.Clone(path), val.Content[i].Value), val.Content[i], val.Content[i+1])
			}
			return
		}
		leaves++
		// The leaf alone, at its place, over the defaults.
		one := &yaml.Node{Kind: yaml.MappingNode}
		cur := one
		for i, p := range path {
			k := &yaml.Node{Kind: yaml.ScalarNode, Value: p}
			if i == len(path)-1 {
				cur.Content = append(cur.Content, k, val)
				break
			}
			next := &yaml.Node{Kind: yaml.MappingNode}
			cur.Content = append(cur.Content, k, next)
			cur = next
		}
		got := config.Default()
		if err := one.Decode(&got); err != nil {
			t.Errorf("docs/configuration.md:%d: %s: %v", firstLine+key.Line-1, strings.Join(path, "."), err)
			return
		}
		got.Validate()
		if !reflect.DeepEqual(emptyIsNil(got), emptyIsNil(want)) {
			def := defaultAt(t, path)
			t.Errorf("docs/configuration.md:%d: %s is shown as the default but the default is %s: show that, or mark the line's comment \"e.g.\"",
				firstLine+key.Line-1, strings.Join(path, "."), def)
		}
	}
	top := doc.Content[0]
	for i := 0; i+1 < len(top.Content); i += 2 {
		walk([]string{top.Content[i].Value}, top.Content[i], top.Content[i+1])
	}
	if leaves < 40 {
		t.Errorf("only %d settings checked: is the reference cut short?", leaves)
	}
}

// emptyIsNil returns c with every empty slice and map made nil: "[]" in
// the reference says the same as a default left unset.
func emptyIsNil(c config.Config) config.Config {
	var walk func(v reflect.Value)
	walk = func(v reflect.Value) {
		switch v.Kind() {
		case reflect.Pointer:
			if !v.IsNil() {
				walk(v.Elem())
			}
		case reflect.Struct:
			for i := 0; i < v.NumField(); i++ {
				if v.Type().Field(i).IsExported() {
					walk(v.Field(i))
				}
			}
		case reflect.Slice, reflect.Map:
			if v.Len() == 0 && !v.IsNil() && v.CanSet() {
				v.SetZero()
				return
			}
			if v.Kind() == reflect.Slice {
				for i := 0; i < v.Len(); i++ {
					walk(v.Index(i))
				}
			}
		}
	}
	walk(reflect.ValueOf(&c).Elem())
	return c
}

// defaultAt renders the default at a YAML path, for the error message.
func defaultAt(t *testing.T, path []string) string {
	b, err := yaml.Marshal(config.Default())
	if err != nil {
		return "?"
	}
	var m any
	if err := yaml.Unmarshal(b, &m); err != nil {
		return "?"
	}
	for _, p := range path {
		mm, ok := m.(map[string]any)
		if !ok {
			return "?"
		}
		m = mm[p]
	}
	out, _ := json.Marshal(m)
	return string(out)
}

// The flags the configuration reference names beside its settings are
// flags of ztpd serve.
func TestDocConfigurationFlagsAreServeFlags(t *testing.T) {
	ref, firstLine := configReference(t)
	serve := findSub(newRootCmd(), "serve")
	for i, l := range strings.Split(ref, "\n") {
		_, comment, ok := strings.Cut(l, "#")
		if !ok {
			continue
		}
		for _, m := range regexp.MustCompile(`--[a-z][a-z0-9-]+`).FindAllString(comment, -1) {
			if lookupFlag(serve, m) == nil {
				t.Errorf("docs/configuration.md:%d: ztpd serve has no flag %s", firstLine+i, m)
			}
		}
	}
}

// Every /healthz answer the docs show is what a running ztpd answers, field
// for field; the HA group's fields are ha.Status's.
func TestDocHealthzSample(t *testing.T) {
	files := docFiles(t)
	sample := regexp.MustCompile(`\{"schema":[^}\n]*\}`)
	type shown struct {
		at   string
		body map[string]any
	}
	var samples []shown
	var groups []string
	for _, f := range files {
		text := strings.Join(f.lines, "\n")
		for _, m := range sample.FindAllStringIndex(text, -1) {
			var body map[string]any
			at := fmt.Sprintf("%s:%d", f.rel, lineOf(text, m[0]))
			if err := json.Unmarshal([]byte(text[m[0]:m[1]]), &body); err != nil {
				t.Errorf("%s: the /healthz sample is not JSON: %v", at, err)
				continue
			}
			samples = append(samples, shown{at, body})
		}
		for _, m := range regexp.MustCompile(`"group": \{([^}]*)\}`).FindAllStringSubmatch(text, -1) {
			groups = append(groups, m[1])
		}
	}
	if len(samples) == 0 || len(groups) == 0 {
		t.Fatalf("found %d /healthz samples and %d group field lists in the docs: is the extraction broken?", len(samples), len(groups))
	}
	var fields []string
	st := reflect.TypeOf(ha.Status{})
	for i := 0; i < st.NumField(); i++ {
		name, _, _ := strings.Cut(st.Field(i).Tag.Get("json"), ",")
		fields = append(fields, name)
	}
	sort.Strings(fields)
	for _, g := range groups {
		var shownFields []string
		for _, q := range regexp.MustCompile(`"([a-z_]+)"`).FindAllStringSubmatch(g, -1) {
			shownFields = append(shownFields, q[1])
		}
		sort.Strings(shownFields)
		if !slices.Equal(shownFields, fields) {
			t.Errorf("the docs show /healthz's group as %v; ha.Status has %v", shownFields, fields)
		}
	}

	bin := buildZtpd(t)
	s := startServe(t, bin, filepath.Join(t.TempDir(), "data"))
	resp, err := http.Get("http://" + s.addr + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var got map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
		t.Fatal(err)
	}
	for _, sm := range samples {
		if !reflect.DeepEqual(sm.body, got) {
			g, _ := json.Marshal(got)
			w, _ := json.Marshal(sm.body)
			t.Errorf("%s: the docs show /healthz answering %s; ztpd answers %s", sm.at, w, g)
		}
	}
}

// docs/commands.md names every command and its subcommands, and every man
// page the docs name ("man ztpd-cluster-create") is one gendocs writes.
func TestDocCommandsPageListsEveryCommand(t *testing.T) {
	root := newRootCmd()
	files := docFiles(t)
	var page []*docFile
	for _, f := range files {
		if f.rel == "docs/commands.md" {
			page = append(page, f)
		}
	}
	if len(page) != 1 {
		t.Fatal("docs/commands.md not found")
	}
	shown := map[string]bool{}
	for _, sc := range shownCommands(page) {
		// Expand "a|b" alternatives into every path they name.
		paths := []string{"ztpd"}
		for _, w := range sc.words[1:] {
			w = cleanWord(w)
			if w == "" || strings.HasPrefix(w, "-") || isStop(w) {
				break
			}
			var next []string
			for _, p := range paths {
				for _, alt := range strings.Split(w, "|") {
					next = append(next, p+" "+alt)
				}
			}
			paths = next
			for _, p := range paths {
				shown[p] = true
			}
		}
	}
	manPages := map[string]bool{"ztpd": true}
	var visit func(c *cobra.Command, depth int)
	visit = func(c *cobra.Command, depth int) {
		for _, sub := range c.Commands() {
			if !sub.IsAvailableCommand() || sub.Name() == "help" {
				continue
			}
			manPages[strings.ReplaceAll(sub.CommandPath(), " ", "-")] = true
			if depth < 2 && !shown[sub.CommandPath()] {
				t.Errorf("docs/commands.md does not name %q (%s)", sub.CommandPath(), sub.Short)
			}
			visit(sub, depth+1)
		}
	}
	visit(root, 0)
	man := regexp.MustCompile(`man (ztpd(?:-[a-z0-9]+)*)`)
	for _, f := range files {
		text := strings.Join(f.lines, "\n")
		for _, m := range man.FindAllStringSubmatchIndex(text, -1) {
			name := text[m[2]:m[3]]
			if !manPages[name] {
				t.Errorf("%s:%d: man %s: gendocs writes no such page", f.rel, lineOf(text, m[0]), name)
			}
		}
	}
}

// foreignFlags are flags the docs name in prose that belong to other
// programs: ztpd-lab's, the kubelet's, atftp's and etcd's.
var foreignFlags = map[string]bool{
	"--ztpd": true, "--kubeletsim": true, "--upgrade": true, "--console": true, "--switches": true,
	"--onie": true, "--vms": true, "--clusters": true, "--ipv6": true, "--dual-stack": true, "--hollow": true, // ztpd-lab's
	"--service-cidr": true, // kubeadm's
	"--node-labels":  true, "--option": true, "--max-txn-ops": true,
}

// A flag named in prose (`--force`) is a flag of some ztpd command.
func TestDocProseFlagsExist(t *testing.T) {
	all := map[string]bool{"--help": true}
	var visit func(c *cobra.Command)
	visit = func(c *cobra.Command) {
		for _, fs := range []*pflag.FlagSet{c.Flags(), c.PersistentFlags()} {
			fs.VisitAll(func(f *pflag.Flag) { all["--"+f.Name] = true })
		}
		for _, sub := range c.Commands() {
			visit(sub)
		}
	}
	visit(newRootCmd())
	flag := regexp.MustCompile("`(--[a-z][a-z0-9-]*)")
	for _, f := range docFiles(t) {
		text := f.prose()
		for _, m := range flag.FindAllStringSubmatchIndex(text, -1) {
			name := text[m[2]:m[3]]
			if !all[name] && !foreignFlags[name] {
				t.Errorf("%s:%d: no ztpd command has the flag %s", f.rel, lineOf(text, m[0]), name)
			}
		}
	}
}

// Every metric the docs name (ztpd_dhcp_dropped_total) is one the code
// registers: its name is a string in the product's source.
func TestDocMetricsExist(t *testing.T) {
	var src strings.Builder
	err := filepath.WalkDir(repoRoot, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(p)
		src.Write(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	code := src.String()
	metric := regexp.MustCompile(`\bztpd_[a-z_]+[a-z]\b`)
	n := 0
	for _, f := range docFiles(t) {
		text := strings.Join(f.lines, "\n")
		for _, m := range metric.FindAllStringIndex(text, -1) {
			name := text[m[0]:m[1]]
			if strings.HasPrefix(text[m[1]:], "=") {
				continue // a benchmark's RESULT field
			}
			n++
			if !strings.Contains(code, `"`+name+`"`) {
				t.Errorf("%s:%d: no metric %s in the code", f.rel, lineOf(text, m[0]), name)
			}
		}
	}
	if n < 10 {
		t.Errorf("only %d metric names found in the docs: is the pattern broken?", n)
	}
}
