package testenv

// ParentArgs is a shell command that prints the command line (arguments joined by
// spaces) of the parent of the first process whose command line holds what. The probe
// itself never matches: what is quoted in two parts in its text.
func ParentArgs(what string) string {
	h := len(what) / 2
	return `for p in /proc/[0-9]*; do c=$(tr '\0' ' ' <$p/cmdline 2>/dev/null); case $c in *"` + what[:h] + `""` + what[h:] + `"*)` +
		` pp=$(sed 's/.*) //' $p/stat | cut -d' ' -f2); tr '\0' ' ' </proc/$pp/cmdline; exit;; esac; done`
}
