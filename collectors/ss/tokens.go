package ss

// tokenize splits an ss entry on white space, keeping parenthesised groups whole even when
// they hold spaces (users:(("Web Content",pid=1,fd=3))). If the parentheses do not balance,
// it falls back to a plain split so that no token swallows the rest of the line.
func tokenize(s string) []string {
	var out []string
	depth := 0
	quoted := false
	start := -1
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' && depth > 0:
			quoted = !quoted
		case quoted:
		case c == '(':
			depth++
		case c == ')' && depth > 0:
			depth--
		case (c == ' ' || c == '\t') && depth == 0:
			if start >= 0 {
				out = append(out, s[start:i])
				start = -1
			}
			continue
		}
		if start < 0 {
			start = i
		}
	}
	if depth > 0 || quoted {
		return splitSpace(s)
	}
	if start >= 0 {
		out = append(out, s[start:])
	}
	return out
}

func splitSpace(s string) []string {
	var out []string
	start := -1
	for i := 0; i < len(s); i++ {
		if s[i] == ' ' || s[i] == '\t' {
			if start >= 0 {
				out = append(out, s[start:i])
				start = -1
			}
		} else if start < 0 {
			start = i
		}
	}
	if start >= 0 {
		out = append(out, s[start:])
	}
	return out
}
