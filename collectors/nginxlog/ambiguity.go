package nginxlog

import (
	"bytes"
	"fmt"
	"strings"
)

// checkDetermined proves, once per format, that no line can be split in two ways that give
// a field of the record two values: a client controls $http_user_agent, $request,
// $http_referer, ..., and where nginx does not escape the text around such a value
// ("[…]" brackets, spaces, anything with escape=none), a crafted value can hold that text
// and shift every field after it. The line's variables are pinned from both ends:
//
//   - from the left, a variable whose end follows from its start: a value nginx computes
//     (numbers, addresses, times: a narrow alphabet) followed by a byte outside that
//     alphabet, or a value that cannot hold a quote (default escaping writes " as \x22,
//     escape=json as \") followed by literal text holding one;
//   - from the right end of the line, the same mirrored (a number before which stands a
//     byte that is not a digit);
//   - a literal byte that no value or literal before it (within the part still open) can
//     hold splits the part there: its first occurrence is that literal.
//
// What is left between the pinned ends is one variable (it takes what is left: a crafted
// value cannot move anything), or several variables that split in more than one way — fine
// when the record reads none of them, refused (ErrAmbiguous) otherwise. Matching needs no
// more than this proof: on a format that passes, every way a line matches gives the same
// record, so the first one found (firstFit, or the regexp) is the record.
func checkDetermined(f Format) error {
	var lits [][]byte // lits[k] precedes vars[k]; lits[len(vars)] ends the line
	var vars []vclass
	var names []string
	read := map[int]bool{}
	seen := map[string]bool{}
	cur := []byte{}
	for _, s := range f.Segs {
		if s.Var == "" {
			cur = append(cur, s.Lit...)
			continue
		}
		lits = append(lits, cur)
		cur = []byte{}
		vars = append(vars, varClass(s.Var, f.Escape))
		names = append(names, s.Var)
		if _, ok := lookupVar([]byte(s.Var)); ok && !seen[s.Var] {
			read[len(vars)-1] = true
		}
		seen[s.Var] = true
	}
	lits = append(lits, cur)

	type span struct{ i, j int }
	todo := []span{{0, len(vars) - 1}}
	for len(todo) > 0 {
		sp := todo[len(todo)-1]
		todo = todo[:len(todo)-1]
		i, j := sp.i, sp.j
		for i < j {
			if leftPinned(&vars[i], lits[i+1]) {
				i++
				continue
			}
			if rightPinned(&vars[j], lits[j]) {
				j--
				continue
			}
			if k := syncLiteral(vars, lits, i, j); k > 0 {
				todo = append(todo, span{i, k - 1}, span{k, j})
				i = j // this span is split
				break
			}
			// several variables whose split no byte decides
			var reads, all []string
			for k := i; k <= j; k++ {
				all = append(all, "$"+names[k])
				if read[k] {
					reads = append(reads, "$"+names[k])
				}
			}
			if len(reads) == 0 {
				break // the record reads none of them: any split gives the same record
			}
			return fmt.Errorf("log_format %s: %w: %s cannot be told apart in a line (%s unescaped text between them can hold "+
				"the text around them), so a client could forge %s; quote the client-controlled values (default escaping writes "+
				"\" as \\x22), log the fields the record needs before them, or use escape=json",
				f.Name, ErrAmbiguous, strings.Join(all, " "), escapeWord(f.Escape), strings.Join(reads, " "))
		}
	}
	return nil
}

func escapeWord(e Escape) string {
	if e == EscapeNone {
		return "with escape=none,"
	}
	return "the"
}

// leftPinned reports whether a value of class c followed by literal next ends at a place
// its start decides.
func leftPinned(c *vclass, next []byte) bool {
	if len(next) == 0 {
		return false
	}
	switch c.kind {
	case classSet:
		return !c.alpha(next[0])
	case classDefault:
		return bytes.IndexByte(next, '"') >= 0
	case classJSON:
		k := bytes.IndexByte(next, '"')
		return k >= 0 && bytes.IndexByte(next[:k], '\\') < 0
	}
	return false
}

// rightPinned reports whether a value of class c preceded by literal prev starts at a
// place its end decides.
func rightPinned(c *vclass, prev []byte) bool {
	if len(prev) == 0 {
		return false
	}
	switch c.kind {
	case classSet:
		return !c.alpha(prev[len(prev)-1])
	case classDefault:
		return bytes.IndexByte(prev, '"') >= 0
	}
	return false
}

// syncLiteral finds a literal lits[k] (i < k <= j) holding a byte that neither the values
// vars[i..k-1] nor the literals between them can hold, so that the first such byte after
// vars[i]'s start is in lits[k]; or one holding a byte that neither vars[k..j] nor the
// literals after it can hold (the last such byte before vars[j]'s end). 0 when none.
func syncLiteral(vars []vclass, lits [][]byte, i, j int) int {
	for k := i + 1; k <= j; k++ {
		for _, c := range lits[k] {
			ok := true
			for m := i; m < k && ok; m++ {
				ok = !vars[m].alpha(c) && (m == i || bytes.IndexByte(lits[m], c) < 0)
			}
			if ok {
				return k
			}
		}
	}
	for k := j; k > i; k-- {
		for _, c := range lits[k] {
			ok := true
			for m := k; m <= j && ok; m++ {
				ok = !vars[m].alpha(c) && (m == k || bytes.IndexByte(lits[m], c) < 0)
			}
			if ok {
				return k
			}
		}
	}
	return 0
}
