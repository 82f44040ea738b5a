package sandbox

import (
	"errors"
	"strconv"
	"strings"
	"time"
)

// nameMax is the longest file name Linux allows (NAME_MAX), in bytes.
const nameMax = 255

// errListing is output of the listing script that is not what it prints.
var errListing = errors.New("unexpected output from the listing")

// parseListing reads what listScript prints: for each file a "size mtime" line, then a
// NUL, then the names, each ended by a NUL. It refuses more than max files, names that
// are empty, hold a slash or are longer than a file name can be, and numbers that are
// not. It holds at most max entries, whose names share out's memory. The programs the
// script runs are the sandbox's to replace, so none of this is taken on trust.
func parseListing(out string, max int) ([]DirEntry, error) {
	stats, names, ok := strings.Cut(out, "\x00")
	if !ok || !strings.HasSuffix(stats, "\n") || !strings.HasSuffix(names, "\x00") {
		return nil, errListing
	}
	var list []DirEntry
	for stats != "" {
		if len(list) == max {
			return nil, errors.New("more files listed than asked for")
		}
		var line, name string
		line, stats, _ = strings.Cut(stats, "\n")
		name, names, ok = strings.Cut(names, "\x00")
		if !ok || name == "" || len(name) > nameMax || strings.Contains(name, "/") {
			return nil, errListing
		}
		a, b, _ := strings.Cut(line, " ")
		if len(a) > 20 || len(b) > 20 {
			return nil, errListing
		}
		size, err1 := strconv.ParseInt(a, 10, 64)
		mtime, err2 := strconv.ParseInt(b, 10, 64)
		if err1 != nil || err2 != nil || size < 0 {
			return nil, errListing
		}
		list = append(list, DirEntry{Name: name, Size: size, ModTime: time.Unix(mtime, 0)})
	}
	if names != "" {
		return nil, errListing
	}
	return list, nil
}
