package agentwire

import (
	"bufio"
	"os"
	"testing"
)

// osPair connects a client session to an agent session over two kernel pipes, as the
// agent's exec does; handler serves the agent's streams.
func osPair(b *testing.B, handler func(*Stream)) *Session {
	b.Helper()
	cr, aw, err := os.Pipe() // agent → client
	if err != nil {
		b.Fatal(err)
	}
	ar, cw, err := os.Pipe() // client → agent
	if err != nil {
		b.Fatal(err)
	}
	go func() {
		Serve(bufio.NewReaderSize(ar, 256<<10), aw, HelloMsg{}, handler)
		aw.Close()
	}()
	s, err := Client(bufio.NewReaderSize(cr, 256<<10), cw, closers{cr, cw}, HelloMsg{}, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close(); ar.Close() })
	return s
}

// benchDownload measures bytes from the agent to Caddy on one stream, as a file read
// does (32 KiB writes, the receive window raised to win).
func benchDownload(b *testing.B, win int) {
	const total = 64 << 20
	s := osPair(b, func(st *Stream) {
		buf := make([]byte, 32<<10)
		for n := 0; n < total; n += len(buf) {
			if _, err := st.Write(Stdout, buf); err != nil {
				return
			}
		}
		st.Exit(0)
	})
	b.SetBytes(total)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		st, err := s.Open([]byte("x"))
		if err != nil {
			b.Fatal(err)
		}
		st.SetReceiveWindow(win)
		n := 0
		for {
			c, err := st.ReadChunk()
			if err != nil {
				break
			}
			n += len(c.Data)
		}
		if n != total {
			b.Fatalf("read %d bytes, want %d", n, total)
		}
	}
}

func BenchmarkDownload(b *testing.B)           { benchDownload(b, InitialWindow) }
func BenchmarkDownloadFileWindow(b *testing.B) { benchDownload(b, FileWindow) }

// BenchmarkUpload measures bytes from Caddy to the agent on one stream.
func BenchmarkUpload(b *testing.B) {
	const total = 64 << 20
	s := osPair(b, func(st *Stream) {
		st.SetReceiveWindow(FileWindow)
		for {
			c, err := st.ReadChunk()
			if err != nil || c.EOF {
				break
			}
		}
		st.Exit(0)
	})
	b.SetBytes(total)
	b.ReportAllocs()
	buf := make([]byte, 8*(MaxData-1))
	for i := 0; i < b.N; i++ {
		st, err := s.Open([]byte("x"))
		if err != nil {
			b.Fatal(err)
		}
		for n := 0; n < total; n += len(buf) {
			if _, err := st.Write(Stdin, buf); err != nil {
				b.Fatal(err)
			}
		}
		st.CloseChannel(Stdin)
		<-st.Done()
	}
}
