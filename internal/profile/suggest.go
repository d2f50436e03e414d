package profile

import (
	"sort"
	"strings"
)

// Suggest returns the known name closest to word (a cluster a profile
// names, say), or "" when none is close enough to be a likely typo.
func Suggest(word string, known []string) string { return suggest(word, known) }

// suggest returns the known name closest to word, or "" when none is close
// enough to be a likely typo. Case is ignored (serial finds Serial), and a
// swap of two neighbouring letters counts as one edit (Serail finds Serial).
func suggest(word string, known []string) string {
	lw := strings.ToLower(word)
	best, bestD := "", -1
	limit := 1 + len(lw)/4
	if limit > 3 {
		limit = 3
	}
	sorted := append([]string(nil), known...)
	sort.Strings(sorted)
	for _, k := range sorted {
		d := editDistance(lw, strings.ToLower(k))
		if d <= limit && (bestD < 0 || d < bestD) {
			best, bestD = k, d
		}
	}
	return best
}

// editDistance is the optimal string alignment distance: insertions,
// deletions, substitutions and transpositions of adjacent bytes each
// count one.
func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 { // nobody mistypes a 64-letter name
		if a == b {
			return 0
		}
		return 1 << 20
	}
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}

// didYouMean is " (did you mean X?)" for the closest of known, else "".
func didYouMean(word string, known []string, quote func(string) string) string {
	if s := suggest(word, known); s != "" && s != word {
		return " (did you mean " + quote(s) + "?)"
	}
	return ""
}
