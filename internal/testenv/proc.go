package testenv

// ParentArgs is a shell command that prints the command line (arguments joined by
// spaces) of the parent of the first process whose command line holds what, and
// whose parent's does not (a child between its fork and its exec still shows its
// parent's). The probe itself never matches: what is quoted in two parts in its text.
func ParentArgs(what string) string {
	h := len(what) / 2
	pat := `*"` + what[:h] + `""` + what[h:] + `"*`
	return `for p in /proc/[0-9]*; do c=$(tr '\0' ' ' <$p/cmdline 2>/dev/null); case $c in ` + pat + `)` +
		` pp=$(sed 's/.*) //' $p/stat | cut -d' ' -f2); a=$(tr '\0' ' ' </proc/$pp/cmdline 2>/dev/null);` +
		` case $a in ` + pat + `) continue;; esac; printf '%s' "$a"; exit;; esac; done`
}
