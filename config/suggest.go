package config

// Suggestions for unknown keys: the outermost unknown key, the keys beside
// it, and the one most likely meant.

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/spf13/viper"

	"github.com/kbridge/kbridge/internal/conferr"
)

// unknownKeys reports the keys of the file that kbridge does not have, each
// with its full dotted name, the closest existing key if one is close, and
// the keys that exist beside it.
func unknownKeys(v *viper.Viper) []*conferr.FieldError {
	known := Keys()
	isSection := func(p string) bool {
		return p == "" || slices.ContainsFunc(known, func(k string) bool { return strings.HasPrefix(k, p+".") })
	}
	keys := v.AllKeys()
	sort.Strings(keys)
	var out []*conferr.FieldError
	for _, k := range keys {
		if slices.Contains(known, k) {
			continue
		}
		// viper names leaves; report the outermost unknown key instead
		// ("foo" for foo: {bar: 1}), once.
		parent := k
		for parent != "" {
			if i := strings.LastIndex(parent, "."); i >= 0 {
				parent = parent[:i]
			} else {
				parent = ""
			}
			if isSection(parent) {
				break
			}
		}
		rest := strings.TrimPrefix(strings.TrimPrefix(k, parent), ".")
		name := strings.SplitN(rest, ".", 2)[0]
		key := conferr.Key(parent, name)
		if slices.Contains(known, key) || slices.ContainsFunc(out, func(fe *conferr.FieldError) bool { return fe.Key == key }) {
			continue // a mapping where a value belongs: decoding says so
		}
		var siblings []string
		for _, kk := range known {
			if rest, ok := strings.CutPrefix(kk, parent+"."); ok || parent == "" {
				if parent == "" {
					rest = kk
				}
				siblings = append(siblings, strings.SplitN(rest, ".", 2)[0])
			}
		}
		siblings = slices.Compact(siblings)
		reason := reasonUnknown
		if near := closest(name, siblings); near != "" {
			reason += ", did you mean " + conferr.Key(parent, near) + "?"
		}
		where := "top-level keys"
		if parent != "" {
			where = "keys under " + parent
		}
		out = append(out, conferr.New(key, nil, fmt.Sprintf("%s (%s: %s)", reason, where, strings.Join(siblings, ", "))))
	}
	return out
}

// closest returns the candidate name most likely meant by a misspelt one:
// the same but for '_' and '-', or at most two edits away. "" if none is.
func closest(name string, candidates []string) string {
	norm := func(s string) string { return strings.NewReplacer("_", "", "-", "").Replace(s) }
	best, bestD := "", 3
	for _, c := range candidates {
		if norm(c) == norm(name) {
			return c
		}
		if d := editDistance(name, c); d < bestD && d < len(c)/2 {
			best, bestD = c, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
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
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
