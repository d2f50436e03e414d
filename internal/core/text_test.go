package core

import "testing"

func TestPrintableText(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"plain\n\tline", "plain\n\tline"},
		{"\x1b[31mred\x1b[0m", "␛[31mred␛[0m"},
		{"\x1b]52;c;cHduZWQ=\x07", "␛]52;c;cHduZWQ=␇"}, // OSC 52: write the clipboard
		{"a\r\nb\rc", "a\nb\nc"},
		{"bad \xff\xfe utf8", "bad \uFFFD\uFFFD utf8"},
		{"c1 \u009b2J del \x7f", "c1 \uFFFD2J del ␡"},
		{"<script>x</script>", "<script>x</script>"}, // HTML is the page's to escape
		{"ünïcode ✓", "ünïcode ✓"},
	} {
		if got := PrintableText(c.in); got != c.want {
			t.Errorf("PrintableText(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
