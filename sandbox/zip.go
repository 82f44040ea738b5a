package sandbox

import (
	"archive/tar"
	"archive/zip"
	"compress/flate"
	"context"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strings"

	cerrdefs "github.com/containerd/errdefs"
	"go.uber.org/zap"
)

// WriteZip writes the directory at the absolute path p (symbolic links to it are
// followed) to w as a zip archive whose entries sit under one folder named like the
// directory. The archive is made while tar streams the directory out, so nothing is
// held or stored beyond one file's compression state. Symbolic links inside become
// symbolic link entries; hard links become copies; devices, FIFOs and sockets are left
// out. An error after the first byte was written leaves w with a truncated archive,
// which no unzip accepts. It fails with [ErrNotFound] or [ErrNotRegular] like Stat, and
// when p is not a directory.
func (s *Sandbox) WriteZip(ctx context.Context, p string, w io.Writer) error {
	if !path.IsAbs(p) {
		return fmt.Errorf("%q: %w", p, ErrRelativePath)
	}
	p = path.Clean(p)
	if err := s.Ensure(ctx); err != nil {
		return err
	}
	st, target, err := s.statFollow(ctx, p)
	switch {
	case cerrdefs.IsNotFound(err):
		return fmt.Errorf("stat %s: %w", p, ErrNotFound)
	case err != nil:
		return fmt.Errorf("%s: %w", p, ErrNotRegular)
	case !st.Mode.IsDir():
		return fmt.Errorf("%s is not a directory", p)
	}
	// tar in the container rather than Docker's archive API: the engine holds the
	// container's lock while an archive stream is open, which would stall every other
	// file operation for as long as a slow download lasts.
	dir, base := path.Dir(target), path.Base(target)
	if target == "/" {
		dir, base = "/", "."
	}
	rc, err := s.startStream(ctx, "/", []string{"tar", "-c", "-f", "-", "-C", dir, base}, nil)
	if err != nil {
		return fmt.Errorf("archiving %s in the sandbox: %w", p, err)
	}
	defer rc.Close()

	root := ZipName(p)
	root = strings.TrimSuffix(root, ".zip")
	zw := zip.NewWriter(w)
	zw.RegisterCompressor(zip.Deflate, func(out io.Writer) (io.WriteCloser, error) {
		return flate.NewWriter(out, flate.BestSpeed)
	})
	type hardLink struct {
		fh     *zip.FileHeader
		source string
	}
	var links []hardLink
	tr := tar.NewReader(rc)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("reading archive of %s: %w", p, err)
		}
		// Docker names entries after the directory's own base name; ours use root.
		rel := hdr.Name
		if _, rest, ok := strings.Cut(strings.TrimSuffix(rel, "/"), "/"); ok {
			rel = rest
		} else {
			rel = ""
		}
		name := root
		if rel != "" {
			name = root + "/" + rel
		}
		fh := &zip.FileHeader{Name: name, Modified: hdr.ModTime}
		var body io.Reader
		switch hdr.Typeflag {
		case tar.TypeDir:
			fh.Name += "/"
			fh.SetMode(fs.ModeDir | fs.FileMode(hdr.Mode).Perm())
		case tar.TypeReg:
			fh.SetMode(fs.FileMode(hdr.Mode).Perm())
			fh.Method = zipMethod(name)
			body = tr
		case tar.TypeSymlink:
			fh.SetMode(fs.ModeSymlink | 0o777)
			body = strings.NewReader(hdr.Linkname)
		case tar.TypeLink:
			// The bytes went by with the file's first name. They are read again once
			// this copy has ended: the engine answers nothing else about the
			// container while an archive of it is being read.
			fh.SetMode(fs.FileMode(hdr.Mode).Perm())
			fh.Method = zipMethod(name)
			links = append(links, hardLink{fh, path.Join(path.Dir(target), hdr.Linkname)})
			continue
		default:
			continue
		}
		if err := writeEntry(zw, fh, body); err != nil {
			return err
		}
	}
	if code, stderr, err := rc.wait(ctx); err == nil && code != 0 {
		// tar goes on past files it cannot read; so does the archive.
		s.log.Warn("archiving a directory for a zip download skipped entries", zap.String("path", p), zap.Int("exit_code", code), zap.String("stderr", stderr))
	}
	rc.Close()
	for _, l := range links {
		f, err := s.Open(ctx, l.source, 0)
		if err != nil {
			return fmt.Errorf("reading %s again for its hard link %s: %w", l.source, l.fh.Name, err)
		}
		err = writeEntry(zw, l.fh, f)
		f.Close()
		if err != nil {
			return err
		}
	}
	return zw.Close()
}

func writeEntry(zw *zip.Writer, fh *zip.FileHeader, body io.Reader) error {
	ew, err := zw.CreateHeader(fh)
	if err != nil {
		return fmt.Errorf("zipping %s: %w", fh.Name, err)
	}
	if body != nil {
		if _, err := io.Copy(ew, body); err != nil {
			return fmt.Errorf("zipping %s: %w", fh.Name, err)
		}
	}
	return nil
}

// ZipName is the file name of the zip archive of directory p: its base name and .zip.
func ZipName(p string) string {
	base := path.Base(path.Clean(p))
	if base == "/" || base == "." {
		base = "root"
	}
	return base + ".zip"
}

// zipMethod stores files that are compressed already and deflates the rest.
func zipMethod(name string) uint16 {
	switch strings.ToLower(path.Ext(name)) {
	case ".zip", ".gz", ".tgz", ".bz2", ".xz", ".zst", ".7z", ".rar", ".jar", ".whl",
		".png", ".jpg", ".jpeg", ".gif", ".webp", ".avif", ".heic",
		".mp3", ".mp4", ".m4a", ".m4v", ".mov", ".mkv", ".webm", ".ogg", ".opus", ".flac",
		".pdf", ".docx", ".xlsx", ".pptx", ".odt", ".ods", ".woff", ".woff2", ".parquet":
		return zip.Store
	}
	return zip.Deflate
}
