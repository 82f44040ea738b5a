package sandbox

import (
	"archive/tar"
	"archive/zip"
	"compress/flate"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strings"
	"sync"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/boxapi"
	"github.com/mcp-sandbox/caddy-mcp-sandbox/internal/human"
	"go.uber.org/zap"
)

// zipLimits bound what one directory archive reads and holds. The tar stream comes from
// a program in the container, which the sandbox may have replaced, so it is untrusted:
// whatever it sends, a download holds at most these, and ends with errZipLimit past them.
type zipLimits struct {
	// entries is the number of tar entries read, of any kind. The zip format puts its
	// directory at the end, so the writer keeps one header (about 200 bytes besides
	// the name) per entry until the stream ends; an endless stream of empty entries
	// also ends here.
	entries int
	// nameBytes is the total length of the names kept for the zip's directory and of
	// the paths of hard links kept until the stream ends.
	nameBytes int
	// hardLinks is the number of hard links kept, to be read again at the end.
	hardLinks int
	// otherBytes is how much of the stream may be other than file contents: headers,
	// long names, PAX records, padding, the data of entries left out. It bounds the
	// time spent on a stream that sends no entry at all (archive/tar reads a chain of
	// PAX headers within one call).
	otherBytes int64
}

// zipLimit is what a directory download allows. Held at worst, every limit reached at
// once: 150,000 entries of about 200 bytes (30 MB), 32 MiB of names, the headers of
// 50,000 hard links waiting (7 MB), one tar header being read (archive/tar reads at
// most 1 MiB of long name or PAX records) and one compressor (1.2 MB): about 62 MB
// (TestZipLimitMemory measures it), well under 200 MB of process memory with the
// garbage collector's headroom. A directory of 150,000 files whose paths average 200
// bytes fits, and its headers take far less than otherBytes; past a limit the download
// ends early, and an archive made with execute can be shared instead.
var zipLimit = zipLimits{
	entries:    150_000,
	nameBytes:  32 << 20,
	hardLinks:  50_000,
	otherBytes: 512 << 20,
}

// errZipLimit is a directory archive that went past one of its limits.
var errZipLimit = errors.New("the directory is too large to download as a zip archive")

// WriteZip writes the directory at the absolute path p (symbolic links to it are
// followed) to w as a zip archive whose entries sit under one folder named like the
// directory. The archive is made while tar streams the directory out, so nothing is
// held or stored beyond one file's compression state and the zip's directory, which
// zipLimit bounds. Symbolic links inside become symbolic link entries; hard links
// become copies; devices, FIFOs and sockets are left out. An error after the first
// byte was written leaves w with a truncated archive, which no unzip accepts. It fails
// with [boxapi.ErrNotFound] or [boxapi.ErrNotRegular] like Stat, and when p is not a directory.
func (s *Sandbox) WriteZip(ctx context.Context, p string, w io.Writer) error {
	if !path.IsAbs(p) {
		return fmt.Errorf("%q: %w", p, boxapi.ErrRelativePath)
	}
	p = path.Clean(p)
	rc, dir, wait, err := s.files.tarDir(ctx, p)
	if err != nil {
		return err
	}
	defer rc.Close()

	zw := zip.NewWriter(w)
	zw.RegisterCompressor(zip.Deflate, newFlateWriter)
	links, err := zipEntries(rc, zw, strings.TrimSuffix(boxapi.ZipName(p), ".zip"), dir, zipLimit)
	if errors.Is(err, errZipLimit) {
		// Say it where an operator looks: the person downloading only sees the
		// transfer end early.
		s.log.Warn("a directory download was cut short at a limit", zap.String("path", p), zap.Error(err))
	}
	if err != nil {
		return fmt.Errorf("archiving %s: %w", p, err)
	}
	wait()
	rc.Close()
	// The bytes of a hard link went by with the file's first name. They are read again
	// now that the stream has ended: the engine answers nothing else about the container
	// while an archive of it is being read.
	buf := make([]byte, 32<<10)
	for _, l := range links {
		f, err := s.Open(ctx, l.source, 0)
		if err != nil {
			return fmt.Errorf("reading %s again for its hard link %s: %w", l.source, l.fh.Name, err)
		}
		err = writeEntry(zw, l.fh, f, buf)
		f.Close()
		if err != nil {
			return err
		}
	}
	return zw.Close()
}

// tarDir starts a tar stream of the directory p (symbolic links to it followed): from
// the agent, else from tar in the container. It returns the directory the entries'
// paths start in, and wait, to call once the stream is read, which logs what tar
// skipped.
func (s *fileStore) tarDir(ctx context.Context, p string) (rc io.ReadCloser, dir string, wait func(), err error) {
	if err := s.sb.Ensure(ctx); err != nil {
		return nil, "", nil, err
	}
	if sess := s.sb.link.agentSession(ctx); sess != nil {
		rc, real, err := agentTar(ctx, sess, p)
		if !agentGone(ctx, err) {
			return rc, path.Dir(real), func() {}, err
		}
	}
	st, target, err := s.statFollow(ctx, p)
	switch {
	case cerrdefs.IsNotFound(err):
		return nil, "", nil, fmt.Errorf("stat %s: %w", p, boxapi.ErrNotFound)
	case err != nil:
		return nil, "", nil, fmt.Errorf("%s: %w", p, boxapi.ErrNotRegular)
	case !st.Mode.IsDir():
		return nil, "", nil, fmt.Errorf("%s is not a directory", p)
	}
	// tar in the container rather than Docker's archive API: the engine holds the
	// container's lock while an archive stream is open, which would stall every other
	// file operation for as long as a slow download lasts.
	dir, base := path.Dir(target), path.Base(target)
	if target == "/" {
		dir, base = "/", "."
	}
	e, err := s.sb.runner.startStream(ctx, "/", []string{"tar", "-c", "-f", "-", "-C", dir, base}, nil)
	if err != nil {
		return nil, "", nil, fmt.Errorf("archiving %s in the sandbox: %w", p, err)
	}
	return e, path.Dir(target), func() {
		if code, stderr, err := e.wait(ctx); err == nil && code != 0 {
			// tar goes on past files it cannot read; so does the archive.
			s.log.Warn("archiving a directory for a zip download skipped entries", zap.String("path", p), zap.Int("exit_code", code), zap.String("stderr", stderr))
		}
	}, nil
}

// hardLink is a zip entry whose bytes are those of the file at source.
type hardLink struct {
	fh     *zip.FileHeader
	source string
}

// zipEntries copies the entries of the tar stream r into zw, each renamed from its
// first path element to root, and returns the hard links, whose bytes are to be read
// again from dir (the directory tar ran in) once the stream has ended. It stops with
// errZipLimit past a limit of lim, and with an error on an entry whose name is not a
// plain relative path (it would write outside the folder when unzipped).
func zipEntries(r io.Reader, zw *zip.Writer, root, dir string, lim zipLimits) ([]hardLink, error) {
	sr := &tarSource{r: r, max: lim.otherBytes}
	tr := tar.NewReader(sr)
	buf := make([]byte, 32<<10)
	var links []hardLink
	names := 0
	for entries := 0; ; entries++ {
		hdr, err := tr.Next()
		if err == io.EOF {
			return links, nil
		}
		if err != nil {
			return nil, fmt.Errorf("reading the archive: %w", err)
		}
		if entries == lim.entries {
			return nil, fmt.Errorf("more than %d entries: %w", lim.entries, errZipLimit)
		}
		// tar names entries after the directory's own base name; ours use root.
		rel := strings.TrimSuffix(hdr.Name, "/")
		if _, rest, ok := strings.Cut(rel, "/"); ok {
			rel = rest
		} else {
			rel = ""
		}
		if rel != "" && (rel != path.Clean(rel) || path.IsAbs(rel) || rel == "." || rel == ".." || strings.HasPrefix(rel, "../")) {
			return nil, fmt.Errorf("reading the archive: entry %q is not a plain relative path", human.Clip(hdr.Name, 200))
		}
		name := root
		if rel != "" {
			name = root + "/" + rel
		}
		if names += len(name); names > lim.nameBytes {
			return nil, fmt.Errorf("more than %d bytes of names: %w", lim.nameBytes, errZipLimit)
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
			body = &contentsReader{r: tr, src: sr, start: sr.content}
		case tar.TypeSymlink:
			fh.SetMode(fs.ModeSymlink | 0o777)
			body = strings.NewReader(hdr.Linkname)
		case tar.TypeLink:
			if len(links) == lim.hardLinks {
				return nil, fmt.Errorf("more than %d hard links: %w", lim.hardLinks, errZipLimit)
			}
			fh.SetMode(fs.FileMode(hdr.Mode).Perm())
			fh.Method = zipMethod(name)
			source := path.Join(dir, hdr.Linkname)
			if names += len(source); names > lim.nameBytes {
				return nil, fmt.Errorf("more than %d bytes of names: %w", lim.nameBytes, errZipLimit)
			}
			links = append(links, hardLink{fh, source})
			continue
		default:
			continue
		}
		sr.contents = true
		err = writeEntry(zw, fh, body, buf)
		sr.contents = false
		if err != nil {
			return nil, err
		}
	}
}

// tarSource counts what the tar reader takes from the stream: file contents, read
// while contents is set, are not bounded (the zip sends them on as they come); the
// rest (headers, padding, entries left out) is, by max bytes.
type tarSource struct {
	r        io.Reader
	contents bool
	content  int64 // bytes of file contents read
	max      int64
	other    int64
}

func (t *tarSource) Read(p []byte) (int, error) {
	if t.contents {
		n, err := t.r.Read(p)
		t.content += int64(n)
		return n, err
	}
	if t.other >= t.max {
		return 0, t.overErr()
	}
	p = p[:min(int64(len(p)), t.max-t.other)]
	n, err := t.r.Read(p)
	t.other += int64(n)
	return n, err
}

func (t *tarSource) overErr() error {
	return fmt.Errorf("more than %d bytes of tar headers, sparse holes and entries left out: %w", t.max, errZipLimit)
}

// contentsReader reads a regular file's contents from the tar reader r. The holes of a
// sparse file come out of archive/tar as zeros the stream never carried: they count
// against the source's other bytes, so that a few bytes of header cannot stand for an
// endless file.
type contentsReader struct {
	r     io.Reader
	src   *tarSource
	start int64 // src.content when the entry began
	made  int64 // bytes handed out
	holes int64 // bytes handed out beyond those read, charged to src
}

func (c *contentsReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.made += int64(n)
	if h := c.made - (c.src.content - c.start); h > c.holes {
		c.src.other += h - c.holes
		c.holes = h
		if c.src.other > c.src.max {
			return 0, c.src.overErr()
		}
	}
	return n, err
}

// flateWriters keeps compressors for reuse: a new one allocates about 1.2 MB, which a
// directory of many small files would otherwise pay per file (ten times slower).
var flateWriters sync.Pool

// newFlateWriter is the zip's deflate compressor: fast rather than small, since the
// archive is made while it downloads.
func newFlateWriter(out io.Writer) (io.WriteCloser, error) {
	if fw, ok := flateWriters.Get().(*flate.Writer); ok {
		fw.Reset(out)
		return pooledFlate{fw}, nil
	}
	fw, err := flate.NewWriter(out, flate.BestSpeed)
	return pooledFlate{fw}, err
}

// pooledFlate goes back to flateWriters when closed.
type pooledFlate struct{ *flate.Writer }

func (w pooledFlate) Close() error {
	err := w.Writer.Close()
	flateWriters.Put(w.Writer)
	return err
}

// writeEntry adds fh to zw with the bytes of body (nil: none), copied through buf.
func writeEntry(zw *zip.Writer, fh *zip.FileHeader, body io.Reader, buf []byte) error {
	ew, err := zw.CreateHeader(fh)
	if err != nil {
		return fmt.Errorf("zipping %s: %w", fh.Name, err)
	}
	if body != nil {
		if _, err := io.CopyBuffer(ew, body, buf); err != nil {
			return fmt.Errorf("zipping %s: %w", fh.Name, err)
		}
	}
	return nil
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
