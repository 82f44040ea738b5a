package agentwire

import (
	"reflect"
	"strings"
	"testing"
)

// Every operation's message comes back as its own type with its fields, and the wire
// form names the operation beside them.
func TestRequestRoundTrip(t *testing.T) {
	for _, r := range []Request{
		ExecRequest{Argv: []string{"sh", "-c", "echo hi"}, Env: []string{"A=1"}, Dir: "/tmp", Stdin: true, TTY: true, Rows: 5, Cols: 9, TimeoutMS: 7, Spare: true, Prefix: []byte{0, 1}},
		JobRequest{JobsDir: "/j", ID: "j0123456789ab", TimeoutMS: 1500, WaitMS: -1, Interactive: true, TTY: true, Agent: "/a", Cwd: "/c d", Head: 3, Tail: 4, Command: "x\ny", Env: []string{"B=2"}},
		JobRequest{JobsDir: "/j", ID: "j0123456789ab", CommandOnStdin: true},
		DialRequest{Port: 80},
		ListenRequest{Port: 8080},
		AcceptRequest{Listener: 3, Remote: "127.0.0.1:5"},
		ChannelRequest{Path: "/s", Token: "t"},
		StatRequest{Path: "/f"},
		ReadRequest{Path: "/f", Offset: 2, Length: -1},
		ReadRequest{Path: "/f", Length: 0},
		WriteRequest{Path: "/f", Max: 9, Mode: 0o600, Mkdir: true, Excl: true, Socket: "/s", Token: "t"},
		ListRequest{Path: "/d", Max: 10, Hide: ".x"},
		TarRequest{Path: "/d"},
	} {
		b, err := Encode(r)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(string(b), `{"op":"`+r.Op()+`"`) {
			t.Errorf("%T encoded as %s", r, b)
		}
		got, err := Decode(b)
		if err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		if g := reflect.ValueOf(got).Elem().Interface(); !reflect.DeepEqual(g, r) {
			t.Errorf("%s decoded as %+v, want %+v", b, g, r)
		}
	}
}

func TestRequestDecodeRefuses(t *testing.T) {
	for _, b := range []string{``, `{}`, `{"op":""}`, `{"op":"pwn"}`, `{"op":"dial","port":"80"}`, `[1]`} {
		if r, err := Decode([]byte(b)); err == nil {
			t.Errorf("Decode(%s) = %+v, want an error", b, r)
		}
	}
}
