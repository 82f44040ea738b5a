//go:build !linux

package main

import "os/exec"

func raiseSlack() {}

func startCmd(cmd *exec.Cmd) error { return cmd.Start() }
