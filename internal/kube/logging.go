package kube

// client-go logs through klog, which writes to the process's stderr unless told
// otherwise: Caddy's output would carry lines such as `E1202 ... "Copying stdin failed"
// err="io: read/write on closed pipe"` whenever an exec's stream ends. Its runtime
// package also re-panics a panic it recovered in one of its goroutines (ReallyCrash),
// which would end Caddy. Both are settings of the whole process, so the first New
// makes them once: klog's messages go to the latest Config.Log given to New, and a
// recovered panic is logged there and goes no further.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/go-logr/logr"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/klog/v2"
)

// LogFunc receives what client-go would have printed: its message (with its key=value
// pairs), its error (nil for none) and whether it is worth a warning. warn is false for
// the expected end of a stream (a pipe or connection closed under a copy when the
// command ended or the caller closed the stream) and for client-go's informational
// messages; true for the rest, among them a panic client-go recovered and the API
// server's warnings.
type LogFunc func(msg string, err error, warn bool)

var (
	logOnce sync.Once
	logTo   atomic.Pointer[LogFunc]
)

// maxLogText bounds one message (a recovered panic's carries its stack).
const maxLogText = 16 << 10

// setLog points klog and client-go's crash handling at f (kept when f is nil). Until a
// New is given a LogFunc, client-go's messages are dropped, never printed.
func setLog(f LogFunc) {
	if f != nil {
		logTo.Store(&f)
	}
	logOnce.Do(func() {
		klog.SetLoggerWithOptions(logr.New(klogSink{}), klog.ContextualLogger(true))
		utilruntime.ReallyCrash = false
	})
}

// emit hands one message to the current LogFunc.
func emit(msg string, err error, warn bool) {
	if f := logTo.Load(); f != nil {
		(*f)(clip(msg, maxLogText), err, warn)
	}
}

// streamEnded reports whether err is how a stream's copy ends when the command ended
// or the caller closed the stream: nothing went wrong.
func streamEnded(err error) bool {
	if errors.Is(err, io.ErrClosedPipe) || errors.Is(err, net.ErrClosed) || errors.Is(err, io.EOF) ||
		errors.Is(err, context.Canceled) {
		return true
	}
	// gorilla/websocket's ErrCloseSent and a normal closure, by their text: the
	// package is client-go's, not one this engine imports.
	msg := err.Error()
	return strings.Contains(msg, "websocket: close sent") || strings.Contains(msg, "websocket: close 1000")
}

// klogSink is the logr sink klog is given: it formats a message with its name and
// key/value pairs and emits it. Verbose messages (V(1) and up) are dropped.
type klogSink struct {
	name string
	kv   []any
}

func (klogSink) Init(logr.RuntimeInfo) {}

func (klogSink) Enabled(level int) bool { return level <= 0 }

func (s klogSink) Info(level int, msg string, kv ...any) {
	if level > 0 {
		return
	}
	emit(s.text(msg, kv), nil, false)
}

func (s klogSink) Error(err error, msg string, kv ...any) {
	emit(s.text(msg, kv), err, err == nil || !streamEnded(err))
}

func (s klogSink) WithValues(kv ...any) logr.LogSink {
	s.kv = append(slices.Clip(s.kv), kv...)
	return s
}

func (s klogSink) WithName(name string) logr.LogSink {
	if s.name != "" {
		name = s.name + "/" + name
	}
	s.name = name
	return s
}

// text is "name: msg k=v ...".
func (s klogSink) text(msg string, kv []any) string {
	var b strings.Builder
	if s.name != "" {
		b.WriteString(s.name + ": ")
	}
	b.WriteString(msg)
	for _, pairs := range [][]any{s.kv, kv} {
		for i := 0; i+1 < len(pairs); i += 2 {
			fmt.Fprintf(&b, " %v=%v", pairs[i], pairs[i+1])
		}
	}
	return b.String()
}

// warningLog gives the API server's warnings (a Warning header: a deprecated field, a
// pod that would break the namespace's security policy) to the LogFunc as warnings.
type warningLog struct{}

func (warningLog) HandleWarningHeaderWithContext(_ context.Context, code int, _ string, text string) {
	if code != 299 || text == "" {
		return
	}
	emit("the API server warns: "+text, nil, true)
}
