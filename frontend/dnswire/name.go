package dnswire

// EqualName compares two domain names ignoring the case of ASCII letters
// only (RFC 4343 section 3): other octets compare as they are, unlike
// strings.EqualFold, which folds Unicode.
func EqualName(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range len(a) {
		x, y := a[i], b[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}
