package main

// version is the agent protocol version this binary speaks.
const version = "1"

func serveMain(args []string) int { return 2 }
