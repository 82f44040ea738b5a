// The fast path of an upload: a one-file archive through Docker's archive API into a
// transfer container, over a connection of its own to a local engine.

package sandbox

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
)

// copyIn streams r (exactly size bytes) into dir/name through Docker's archive API
// and the container id (a transfer container): a one-file tar made on the fly, so
// nothing is buffered.
func (s *fileStore) copyIn(ctx context.Context, id, dir, name string, r io.Reader, size int64) (int64, error) {
	ts, err := newTarStream(name, r, size)
	if err != nil {
		return 0, err
	}
	if s.caps().LocalFiles {
		err = s.putArchive(ctx, id, dir, ts)
	} else {
		err = s.cli.CopyIn(ctx, id, dir, ts)
	}
	ts.close()
	if err != nil {
		n, rerr := ts.result()
		if rerr != nil && rerr != io.EOF {
			err = rerr // the upload's own failure says more than Docker's
		}
		return n, fmt.Errorf("copying into the sandbox: %w", err)
	}
	n, rerr := ts.result()
	if rerr != io.EOF {
		return n, fmt.Errorf("copying into the sandbox: the archive was not read to its end: %w", io.ErrUnexpectedEOF)
	}
	return n, nil
}

// putArchiveSendBuffer is the socket send buffer of putArchive's connection: room for
// a few chunks, so the engine finds a chunk waiting whenever it reads.
const putArchiveSendBuffer = 4 << 20

// putArchive is CopyToContainer (without overwriting a directory with a file or the
// reverse) over a connection of its own to a local engine, sending the archive with its
// length in chunks of up to a MiB. The Docker client sends request bodies chunked, 32 KiB
// at a time, through tracing wrappers; on this path that costs about a third of the
// throughput.
func (s *fileStore) putArchive(ctx context.Context, id, dir string, ts *tarStream) error {
	conn, err := dockerOf(s.cli).Dialer()(ctx)
	if err != nil {
		return fmt.Errorf("connecting to Docker: %w", err)
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	if uc, ok := conn.(*net.UnixConn); ok {
		_ = uc.SetWriteBuffer(putArchiveSendBuffer)
	}
	api := "/containers/" + url.PathEscape(id) + "/archive"
	if v := dockerOf(s.cli).ClientVersion(); v != "" {
		api = "/v" + strings.TrimPrefix(v, "v") + api
	}
	query := url.Values{"path": {dir}, "noOverwriteDirNonDir": {"true"}}
	head := fmt.Sprintf("PUT %s?%s HTTP/1.1\r\nHost: docker\r\nUser-Agent: mcp-sandbox\r\n"+
		"Content-Type: application/x-tar\r\nContent-Length: %d\r\nConnection: close\r\n\r\n", api, query.Encode(), ts.length())
	_, werr := io.WriteString(conn, head)
	if werr == nil {
		_, werr = ts.WriteTo(conn)
	}
	if werr != nil && ts.failed() {
		// The upload itself failed. The archive ends short, so the engine gives up; its
		// answer marks the moment it has, after which nothing writes the partial file
		// and removing it is for good.
		if cw, ok := conn.(interface{ CloseWrite() error }); ok && cw.CloseWrite() == nil {
			_ = conn.SetReadDeadline(time.Now().Add(uploadStepTimeout))
			if resp, err := http.ReadResponse(bufio.NewReader(conn), nil); err == nil {
				resp.Body.Close()
			}
		}
		return werr
	}
	// After a write error the engine may have answered early (a missing container or
	// directory); its answer says more than the broken pipe.
	if werr != nil {
		_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		if werr != nil {
			return fmt.Errorf("sending the archive: %w", werr)
		}
		return fmt.Errorf("reading Docker's answer: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 == 2 && werr == nil {
		return nil
	}
	var msg struct {
		Message string `json:"message"`
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if json.Unmarshal(body, &msg) != nil || msg.Message == "" {
		msg.Message = strings.TrimSpace(string(body))
	}
	err = fmt.Errorf("Docker answered %s: %s", resp.Status, msg.Message) //nolint:staticcheck // ST1005: Docker is a name
	if resp.StatusCode == http.StatusNotFound {
		err = fmt.Errorf("%w: %w", cerrdefs.ErrNotFound, err)
	}
	return err
}
