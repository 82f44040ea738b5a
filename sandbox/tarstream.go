// tarStream: a one-file tar archive made on the fly around a stream of known length,
// read ahead in chunks.

package sandbox

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"sync"
	"time"
)

// tarStream is a one-file tar archive around a stream of known length, made as it is
// read: header, the stream's bytes, padding and trailer. Docker's client reads it
// directly, with no pipe. A goroutine reads the stream ahead in chunks of up to 1 MiB, so
// that receiving the next bytes overlaps with Docker taking the last ones (Docker's
// client reads its request body in small pieces, one after the other). A stream
// shorter or longer than announced fails the archive.
type tarStream struct {
	head, tail []byte
	cur        []byte // what is left of the chunk being handed out
	curBuf     []byte // the whole buffer of that chunk, to recycle
	full       chan tarChunk
	free       chan []byte
	stop       chan struct{}
	started    bool
	n          int64 // bytes of the stream handed out
	err        error // sticky; io.EOF once the whole archive was read

	// A copy of n and err for the goroutine that called CopyToContainer.
	mu     sync.Mutex
	pubN   int64
	pubErr error

	body io.Reader
	size int64
}

// tarChunk is a piece of the stream read ahead, or how the stream ended.
type tarChunk struct {
	buf []byte
	n   int
	err error // io.EOF after exactly size bytes
}

const (
	tarChunkSize = 1 << 20
	tarChunks    = 4
)

func newTarStream(name string, body io.Reader, size int64) (*tarStream, error) {
	var hb bytes.Buffer
	tw := tar.NewWriter(&hb)
	if err := tw.WriteHeader(&tar.Header{
		Typeflag: tar.TypeReg, Name: name, Size: size, Mode: 0o644,
		ModTime: time.Now().Truncate(time.Second), Format: tar.FormatPAX,
	}); err != nil {
		return nil, fmt.Errorf("making the archive header: %w", err)
	}
	pad := (512 - size%512) % 512
	return &tarStream{
		head: hb.Bytes(), tail: make([]byte, pad+1024), body: body, size: size,
		full: make(chan tarChunk, tarChunks), free: make(chan []byte, tarChunks), stop: make(chan struct{}),
	}, nil
}

// readAhead reads the stream into free buffers until it ends or fails.
func (t *tarStream) readAhead() {
	for range tarChunks {
		t.free <- make([]byte, tarChunkSize)
	}
	var got int64
	for {
		var buf []byte
		select {
		case buf = <-t.free:
		case <-t.stop:
			return
		}
		var c tarChunk
		if got < t.size {
			k, err := io.ReadFull(t.body, buf[:min(int64(len(buf)), t.size-got)])
			if err == io.ErrUnexpectedEOF {
				err = io.EOF // a short stream; told apart below
			}
			got += int64(k)
			switch {
			case err == io.EOF && got < t.size:
				err = fmt.Errorf("upload ended after %d of %d bytes: %w", got, t.size, io.ErrUnexpectedEOF)
			case err == io.EOF:
				err = nil
			}
			c = tarChunk{buf: buf, n: k, err: err}
		} else {
			// The stream must end here: a longer one is not the file announced.
			var one [1]byte
			_, err := io.ReadFull(t.body, one[:])
			switch err {
			case nil:
				err = fmt.Errorf("the upload is longer than the %d bytes announced", t.size)
			case io.EOF:
			}
			c = tarChunk{buf: buf, err: err}
		}
		select {
		case t.full <- c:
		case <-t.stop:
			return
		}
		if c.err != nil {
			return
		}
	}
}

// length is the size of the whole archive.
func (t *tarStream) length() int64 { return int64(len(t.head)) + t.size + int64(len(t.tail)) }

// failed reports whether reading the stream failed (as opposed to writing the archive).
func (t *tarStream) failed() bool {
	_, err := t.result()
	return err != nil && err != io.EOF
}

// WriteTo writes the whole archive to w, each chunk read ahead in one write. It is an
// alternative to Read, not to be mixed with it.
func (t *tarStream) WriteTo(w io.Writer) (total int64, err error) {
	defer func() {
		t.mu.Lock()
		t.pubN, t.pubErr = t.n, t.err
		t.mu.Unlock()
	}()
	write := func(b []byte) error {
		k, err := w.Write(b)
		total += int64(k)
		return err
	}
	if err := write(t.head); err != nil {
		return total, err
	}
	t.head = nil
	t.started = true
	go t.readAhead()
	for {
		c := <-t.full
		if c.err == io.EOF {
			break
		}
		if c.err != nil {
			t.err = c.err
			return total, c.err
		}
		if err := write(c.buf[:c.n]); err != nil {
			return total, err
		}
		t.n += int64(c.n)
		t.free <- c.buf
	}
	if err := write(t.tail); err != nil {
		return total, err
	}
	t.tail = nil
	t.err = io.EOF
	return total, nil
}

// close stops the read-ahead; the stream is not read any further.
func (t *tarStream) close() { close(t.stop) }

// result returns the bytes of the stream handed out and the archive's error (io.EOF
// when the whole archive was read).
func (t *tarStream) result() (int64, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.pubN, t.pubErr
}

func (t *tarStream) Read(p []byte) (int, error) {
	k, err := t.read(p)
	t.mu.Lock()
	t.pubN, t.pubErr = t.n, t.err
	t.mu.Unlock()
	return k, err
}

// read is Read, touching only fields its one caller owns.
func (t *tarStream) read(p []byte) (int, error) {
	if t.err != nil {
		return 0, t.err
	}
	if len(t.head) > 0 {
		k := copy(p, t.head)
		t.head = t.head[k:]
		return k, nil
	}
	if !t.started {
		t.started = true
		go t.readAhead()
	}
	for t.body != nil && len(t.cur) == 0 {
		if t.curBuf != nil {
			t.free <- t.curBuf
			t.curBuf = nil
		}
		c := <-t.full
		switch {
		case c.err == io.EOF:
			t.body = nil // done: on to the padding
		case c.err != nil:
			t.err = c.err
			return 0, c.err
		default:
			t.cur, t.curBuf = c.buf[:c.n], c.buf
		}
	}
	if len(t.cur) > 0 {
		k := copy(p, t.cur)
		t.cur = t.cur[k:]
		t.n += int64(k)
		return k, nil
	}
	if len(t.tail) == 0 {
		t.err = io.EOF
		return 0, io.EOF
	}
	k := copy(p, t.tail)
	t.tail = t.tail[k:]
	return k, nil
}
