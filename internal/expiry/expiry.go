// Package expiry parses the expiry times that signed links and cookies carry as decimal
// Unix seconds.
//
// A signature covers the number, not the text it was read from, so a lenient parser
// would let one signed link be written many ways ("+1767225600", "01767225600"): each
// would pass the check, and each would look like a different link to anything that keys
// on the text (logs, caches, the console's link ids). Parse accepts exactly the text
// that strconv.FormatInt makes, for the numbers a link can carry.
package expiry

// MaxDigits bounds the length of an expiry: 12 digits reach the year 33658, far past
// any lifetime the server signs, and a longer field is refused before it is looked at.
const MaxDigits = 12

// Parse reads s as Unix seconds written the canonical way: decimal digits only, no sign,
// no leading zeros (except "0" itself), at most [MaxDigits] digits. It does not allocate.
func Parse(s string) (int64, bool) {
	if len(s) == 0 || len(s) > MaxDigits || (s[0] == '0' && len(s) > 1) {
		return 0, false
	}
	var n int64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0') // cannot overflow: 12 digits are far below 2^63
	}
	return n, true
}
