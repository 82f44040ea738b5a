package main

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
)

const slackTestEnv = "MCP_SANDBOX_TEST_SLACK"

func timerSlack() uintptr {
	v, _, _ := syscall.RawSyscall(syscall.SYS_PRCTL, prGetTimerslack, 0, 0)
	return v
}

// slackTestMain is this test binary run by TestSlack: "agent" raises its slack (an exec
// of itself), says it, and starts itself as "child" through startCmd, which says its own.
func slackTestMain(mode string) int {
	if mode == "child" {
		fmt.Printf("child %d\n", timerSlack())
		return 0
	}
	raiseSlack()
	fmt.Printf("agent %d pid %d\n", timerSlack(), os.Getpid())
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), slackTestEnv+"=child")
	cmd.Stdout = os.Stdout
	if err := startCmd(cmd); err != nil {
		fmt.Println(err)
		return 1
	}
	if err := cmd.Wait(); err != nil {
		fmt.Println(err)
		return 1
	}
	return 0
}

// The agent and the runner run with a raised timer slack, set before the runtime made
// its threads (they exec themselves once, keeping their pid), and what they start gets
// the kernel's default back.
func TestSlack(t *testing.T) {
	if timerSlack() != childSlack {
		t.Skipf("this process's timer slack is %d, not the kernel's default", timerSlack())
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), slackTestEnv+"=agent")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	want := fmt.Sprintf("agent %d pid %d\nchild %d\n", runtimeSlack, cmd.Process.Pid, childSlack)
	if got := string(out); !strings.Contains(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}
}
