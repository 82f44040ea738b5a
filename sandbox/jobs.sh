# Job runner for the MCP sandbox. Run as: bash -c 'S=$MCP_SANDBOX_RUNNER; unset MCP_SANDBOX_RUNNER; eval "$S"' mcpjob <mode> <jobs dir> <id> ...
# with this file in MCP_SANDBOX_RUNNER, so the command lines of its processes stay short.
#
# Every command runs as a job whose state lives in files inside the container, so it
# outlives the Docker exec that started it, Caddy and the client:
#   <id>.cmd   a long command       <id>.meta  start time, timeout, flags, runner (pid, or pid:start time), cwd, command
#   <id>.out   stdout (whole)       <id>.err   stderr (whole)
#   <id>.pid   process group id of the command (its pid)
#   <id>.in    FIFO feeding stdin (interactive jobs only)
#   <id>.tty   present for a tty job: the command runs under a pseudo-terminal held
#              by "$MCP_SANDBOX_AGENT pty", in a session of its own
#   <id>.inw   pid of the process writing the last input to .in
#   <id>.ins   present once the last input is all written to .in
#   <id>.off   "<stdout offset> <stderr offset>": output already delivered
#   <id>.prev  the offsets before and after the last delivery (to send it again)
#   <id>.exit  exit status and end time, written last; .timedout, .killed (job_kill),
#              .cancelled (the call was cancelled) and .held say why or what
#   <id>.bg    "<job id> <pid> <hex of its command>": the job that took over the
#              processes the command left holding its output (see handover)
#   <id>.from  in that job: the id of the job it took over from
#   .tick      a FIFO nobody writes to: `read -t N -u 9` on it sleeps without a process
#
# Output to the caller (Caddy) on stdout: one header line
#   MCPJOB1 <state> <exit> <out size> <err size> <out from> <err from> <out sent> <err sent> <out lines> <err lines> <out line> <err line> <ran> <flags>
# then <out sent> bytes of stdout (the head, then the tail when the new output is longer
# than the budget), while stderr carries <err sent> bytes of stderr the same way. The
# lines fields count the newlines of the whole new range when it was cut, else "-"; the
# line fields give the number of the line the new range starts in when it is longer
# than the head (so the caller may cut it), else "-". ran is how long the job has run
# (running) or ran (done), in milliseconds, or "-" when unknown.
# The flags are "-" or a list of timedout, killed, cancelled, held:<pid>, inputwaiting,
# inputsent (all of this call's input is in the job's stdin pipe),
# bg:<job id>:<pid>:<hex of up to 80 bytes of its command line>, each ended by a comma.
# A refusal is the header alone: "MCPJOB1 <why>" (unknown, notinteractive, nocwd,
# taken, inputwaiting, notty). Caddy reads all of it strictly (jobwire.go).
#
# Only bash builtins run on the common path; a few small programs (stat, head, tail, wc)
# run when there is output to send.
#
# It needs bash 5.1 (wait -n -p, EPOCHREALTIME, mapfile -d); an older bash gets the one
# answer "MCPJOB1 oldbash <major>.<minor>" before anything else runs.

if ((BASH_VERSINFO[0] < 5 || (BASH_VERSINFO[0] == 5 && BASH_VERSINFO[1] < 1))); then
	echo "MCPJOB1 oldbash ${BASH_VERSINFO[0]}.${BASH_VERSINFO[1]}"
	exit 0
fi

tick() { exec 9<>"$J/.tick"; }

# pstat <dir in /proc>: sets pstate, pppid, pgrp and psid from the process's stat (the
# part after the command name, which may hold spaces); fails when the process is gone.
pstat() {
	local line
	read -r line 2>/dev/null <"$1/stat" || return 1
	set -- ${line##*) }
	pstate=$1 pppid=$2 pgrp=$3 psid=$4
}

# holds <dir in /proc>: whether the process has the job's output open as its stdout or
# stderr.
holds() {
	[ "$1/fd/1" -ef "$d.out" ] || [ "$1/fd/2" -ef "$d.err" ] ||
		[ "$1/fd/1" -ef "$d.err" ] || [ "$1/fd/2" -ef "$d.out" ]
}

# writer: whether the process writing the job's last input still runs (its pid is in
# .inw and it carries "mcpjob-input <id>" in its arguments); sets wp to its pid.
writer() {
	local a
	read -r wp 2>/dev/null <"$d.inw" || return 1
	[ -n "$wp" ] && [ -r "/proc/$wp/cmdline" ] || return 1
	mapfile -d '' a 2>/dev/null <"/proc/$wp/cmdline"
	[[ " ${a[*]} " == *" mcpjob-input $id "* ]]
}

# killjob kills the job's process group (found by its id, so a command that emptied
# its environment is found too), twice, around a scan for group members that a
# fork-heavy command may have started meanwhile (and, for a job handed over, for
# processes holding its output), and the writer of its input. For a tty job, the
# session of the terminal goes too: the holder's child leads it.
killjob() {
	local pg p pstate pppid pgrp psid wp h= ts=-
	writer && kill -KILL "$wp" 2>/dev/null
	read -r pg 2>/dev/null <"$d.pid" || return 0
	[ -n "$pg" ] || return 0
	[ -e "$d.from" ] && h=1
	if [ -e "$d.tty" ]; then
		for p in /proc/[0-9]*; do
			pstat "$p" && [ "$pppid" = "$pg" ] && [ "$psid" = "${p#/proc/}" ] && ts=$psid && break
		done
	fi
	kill -KILL -- "-$pg" 2>/dev/null
	for p in /proc/[0-9]*; do
		{ pstat "$p" && { [ "$pgrp" = "$pg" ] || [ "$psid" = "$ts" ]; }; } || { [ -n "$h" ] && holds "$p"; } && kill -KILL "${p#/proc/}" 2>/dev/null
	done
	kill -KILL -- "-$pg" 2>/dev/null
}

# members <pgid>: whether a process of the group (one scan may miss a process that
# forks and exits over and over, a signal does not) or one holding the job's output
# still runs.
members() {
	local p
	kill -0 -- "-$1" 2>/dev/null && return 0
	for p in /proc/[0-9]*; do
		holds "$p" && return 0
	done
	return 1
}

# pids: sets m and n to the container's process limit and count; fails when unknown.
pids() {
	{ read -r m <"/sys/fs/cgroup/pids.max" && read -r n <"/sys/fs/cgroup/pids.current"; } 2>/dev/null ||
		{ read -r m <"/sys/fs/cgroup/pids/pids.max" && read -r n <"/sys/fs/cgroup/pids/pids.current"; } 2>/dev/null
	[[ $m =~ ^[0-9]{1,9}$ && $n =~ ^[0-9]{1,9}$ ]]
}

# full <pgid>: whether the container is at its process limit, half of it in the group.
full() {
	local m n k=0 p pstate pppid pgrp psid
	pids && ((n + 10 >= m)) || return 1
	for p in /proc/[0-9]*; do
		pstat "$p" && [ "$pgrp" = "$1" ] && ((++k))
	done
	((2 * k >= m))
}

# handover <pid>: makes what the command left running with its output open (its
# process group, and processes holding the output, pid among them) a job of its own
# with no timeout, whose runner is the timeout's process turned to "watch". Records it
# in .bg; fails when it cannot. It starts no process: at the container's process
# limit (a fork bomb) that would fail and end the runner.
handover() {
	local b i a cmd hex= x t0=$EPOCHREALTIME LC_ALL=C
	[ -e "$d.timedout" ] && return 1
	for ((i = 0; i < 3; i++)); do
		printf -v b 'j%08x%04x' "$EPOCHSECONDS" $(((RANDOM << 1 ^ RANDOM) & 65535))
		set -C
		echo "$t0 0 0 $w $cwd" 2>/dev/null >"$J/$b.meta" && break
		b=
	done
	set +C
	[ -n "$b" ] && : >>"$d.off" && echo "$c" >"$J/$b.pid" && echo "$id" >"$J/$b.from" || return 1
	mapfile -d '' a 2>/dev/null <"/proc/$1/cmdline"
	cmd=${a[*]}
	printf '%s 0 0 %s %s\n%.300s\n' "$t0" "$w" "$cwd" "${cmd:-$C}" >"$J/$b.meta"
	for ((i = 0; i < ${#cmd} && i < 80; i++)); do
		printf -v x %02x "'${cmd:i:1}"
		hex+=${x: -2}
	done
	echo "$b $1 $hex" >"$d.bg" && kill -USR1 "$w"
}

# usec <time as EPOCHREALTIME gives it, with the locale's decimal point>: sets us to
# the time in microseconds; fails for anything else (a time read back from a file).
usec() {
	[[ $1 =~ ^[0-9]{1,12}[.,][0-9]{6}$ ]] || return 1
	us=$((10#${1/[.,]/}))
}

# ran <state>: sets ran to the job's running time in ms, from its start in .meta to its
# end in .exit (done) or now (running), or "-".
ran() {
	local t0 t1 us
	ran=-
	read -r t0 _ 2>/dev/null <"$d.meta" && usec "$t0" || return 0
	t0=$us
	if [ "$1" = done ]; then
		read -r _ t1 2>/dev/null <"$d.exit" && usec "$t1" || return 0
	elif [ "$1" = running ]; then
		usec "$EPOCHREALTIME"
	else
		return 0
	fi
	ran=$(((us - t0) / 1000))
	((ran < 0)) && ran=0
}

# alive: whether the job's runner still runs (its pid is in .meta and the process
# still carries the job id in its arguments; a restarted container reuses pids).
alive() {
	local start to inter r
	read -r start to inter r _ 2>/dev/null <"$d.meta" || return 1
	runs "$r" "$id"
}

# runs <runner> <id>: whether the runner .meta names still runs. A runner is named by
# "<pid>:<start time>" (a runner forked from a spare, whose command line does not name
# the job; the start time, in clock ticks since boot, tells a reused pid apart) or by
# its pid alone (its command line names the job).
runs() {
	local a pst
	if [[ $1 == *:* ]]; then
		pstart "${1%%:*}" && [ "$pst" = "${1#*:}" ]
		return
	fi
	[ -r "/proc/$1/cmdline" ] || return 1
	mapfile -d '' a 2>/dev/null <"/proc/$1/cmdline"
	[[ " ${a[*]} " == *" $2 "* ]]
}

# pstart <pid>: sets pst to the process's start time; fails when it is gone.
pstart() {
	local line
	read -r line 2>/dev/null <"/proc/$1/stat" || return 1
	set -- ${line##*) }
	pst=${20}
	[ -n "$pst" ]
}

# emit <state> <head> <tail> [keep]: sends the output produced since the last delivery,
# then records it as delivered (not with keep: the answer goes to nobody). head and
# tail are the bytes kept of each end of a long range.
emit() {
	local state=$1 H=$2 T=$3 keep=$4 ex=- os=0 es=0 oo=0 eo=0 on=0 en=0 ol=- el=- of=- ef=- flags= ran b p x
	read -r oo eo 2>/dev/null <"$d.off"
	oo=${oo:-0} eo=${eo:-0}
	if [ -s "$d.out" ] || [ -s "$d.err" ]; then
		set -- $(stat -c %s "$d.out" "$d.err" 2>/dev/null)
		os=${1:-0} es=${2:-0}
	fi
	# A file cut shorter (say, by the command itself) restarts delivery at its end.
	((oo > os)) && oo=$os
	((eo > es)) && eo=$es
	# A runner that could not write its status (killed, or at the process limit) leaves
	# a job that ended without one: lost.
	[ "$state" = done ] && { read -r ex _ 2>/dev/null <"$d.exit"; [[ $ex =~ ^[0-9]{1,3}$ ]] || ex=- state=lost; }
	ran "$state"
	[ -e "$d.timedout" ] && flags+=timedout,
	[ -e "$d.killed" ] && flags+=killed,
	[ -e "$d.cancelled" ] && flags+=cancelled,
	[ -s "$d.held" ] && { read -r h <"$d.held"; flags+=held:$h,; }
	[ -s "$d.bg" ] && { read -r b p x <"$d.bg"; flags+=bg:$b:$p:$x,; }
	[ -e "$d.inw" ] && [ "$state" = running ] && writer && flags+=inputwaiting,
	[ -n "$insent" ] && [ -e "$d.ins" ] && flags+=inputsent,
	on=$((os - oo)) en=$((es - eo))
	((on < 0)) && on=0
	((en < 0)) && en=0
	local osend=$on esend=$en
	# Lines are counted up to 100 MB; beyond, the marker gives bytes only.
	if ((on > H + T)); then
		osend=$((H + T))
		((on <= 100000000)) && ol=$(($(range "$d.out" "$oo" "$on" | wc -l)))
	fi
	if ((en > H + T)); then
		esend=$((H + T))
		((en <= 100000000)) && el=$(($(range "$d.err" "$eo" "$en" | wc -l)))
	fi
	# The line a range that may be cut starts in, for the marker to name the lines left
	# out: counted up to 100 MB too.
	if ((on > H && oo + on <= 100000000)); then of=$(($(range "$d.out" 0 "$oo" | wc -l) + 1)); fi
	if ((en > H && eo + en <= 100000000)); then ef=$(($(range "$d.err" 0 "$eo" | wc -l) + 1)); fi
	# Recorded as delivered only once sent: a runner whose reader went (the agent was
	# killed while the command ran) leaves its output to the next poll.
	# .prev keeps the offsets before and after it: a delivery written into the pipe of an
	# agent that died before reading it is sent again by "poll ... again".
	echo "MCPJOB1 $state $ex $os $es $oo $eo $osend $esend $ol $el $of $ef $ran ${flags:--}" &&
		send "$d.out" "$oo" "$on" "$H" "$T" &&
		send "$d.err" "$eo" "$en" "$H" "$T" >&2 &&
		[ "$keep" != keep ] &&
		echo "$oo $eo $os $es" >"$d.prev" &&
		echo "$os $es" >"$d.off"
}

# range <file> <from> <n>: n bytes of file from offset from.
range() {
	if (($3 == 0)); then
		return
	elif (($2 == 0)); then
		head -c "$3" "$1"
	else
		tail -c +$(($2 + 1)) "$1" | head -c "$3"
	fi
}

# send <file> <from> <n> <head> <tail>: the range, or its head and tail when longer.
send() {
	if (($3 <= $4 + $5)); then
		range "$1" "$2" "$3"
	else
		range "$1" "$2" "$4"
		range "$1" $(($2 + $3 - $5)) "$5"
	fi
}

# preview: sets P to the first 300 bytes of the command.
preview() {
	local LC_ALL=C
	P=${C:0:300}
	[ "$src" = stdin ] && IFS= read -r -N 300 P <"$d.cmd"
}

# main runs a mode. It is a function so that a spare runner (below) has parsed all of
# the script before its request comes.
main() {
mode=$1 J=$2 id=$3
d=$J/$id
case $mode in
run)
	# run <dir> <id> <timeout s> <wait s, -1 = to the end> <interactive 0|1> <tty 0|1> <cwd> <head> <tail> <cmd from: env|stdin>
	# A tty job runs its command under "$MCP_SANDBOX_AGENT pty" (the agent's binary).
	T=$4 W=$5 I=$6 Y=$7 cwd=$8 H=$9 TL=${10} src=${11}
	A=$MCP_SANDBOX_AGENT
	unset MCP_SANDBOX_AGENT
	if [ "$Y" = 1 ] && ! [ -x "$A" ]; then
		echo "MCPJOB1 notty"
		exit 0
	fi
	if ! [ -d "$J" ]; then mkdir -p "$J" || exit 3; fi
	if ! [ -p "$J/.tick" ]; then mkfifo "$J/.tick" 2>/dev/null || [ -p "$J/.tick" ] || exit 3; fi
	if ! cd -- "$cwd" 2>/dev/null; then
		echo "MCPJOB1 nocwd"
		exit 0
	fi
	# Claim the id (another call may have drawn the same one): .meta names this
	# script as the runner until the real one starts.
	set -C
	t0=$EPOCHREALTIME
	me=$$
	pstart "$me" && me=$me:$pst
	if ! echo "$t0 $T $I $me $cwd" 2>/dev/null >"$d.meta"; then
		echo "MCPJOB1 taken"
		exit 0
	fi
	set +C
	# Short commands come in the environment, long ones (over Linux's 128 KiB limit for
	# one argument) on stdin into a file.
	if [ "$src" = stdin ]; then
		cat >"$d.cmd" || exit 3
	fi
	C=$MCP_SANDBOX_CMD
	unset MCP_SANDBOX_CMD
	tick
	# The input FIFO exists, held open on fd 3, before the runner answers: job_input
	# may come at once, and what it writes waits in the pipe until the command reads
	# it (a FIFO nobody holds open drops what it holds). The runner's subshell takes
	# fd 3 over; this script lets go of it once that has started.
	inp=/dev/null
	if [ "$I" = 1 ]; then mkfifo "$d.in" && exec 3<>"$d.in" && inp=$d.in; fi
	(
		trap '' HUP
		# Job control gives the command a process group of its own (its id is the
		# command's pid) without exec'ing setsid; job notices go to /dev/null.
		set -m
		# The holder of a tty job's terminal puts its output on stdout; its stderr
		# gets only its own errors.
		pty=()
		[ "$Y" = 1 ] && : >"$d.tty" && pty=("$A" pty --)
		if [ "$src" = stdin ]; then
			"${pty[@]}" bash "$d.cmd" <"$inp" >"$d.out" 2>"$d.err" 3<&- 9<&- &
		else
			"${pty[@]}" bash -c "$C" <"$inp" >"$d.out" 2>"$d.err" 3<&- 9<&- &
		fi
		c=$!
		echo "$c" >"$d.pid"
		(
			# handover turns it into the runner of the job that takes over.
			trap 'read -r b _ <"$d.bg" && export MCP_SANDBOX_RUNNER=$S &&
				exec bash -c "S=\$MCP_SANDBOX_RUNNER; unset MCP_SANDBOX_RUNNER; eval \"\$S\"" mcpjob watch "$J" "$b" "$c"' USR1
			read -t "$T" -u 9
			: >"$d.timedout"
			killjob
		) &
		w=$!
		wait "$c"
		e=$?
		exec 3>&-
		# Input nobody will read: a writer still waiting on the pipe goes too. One that
		# has written all of it (the input the command ended on) is given 0.5 s to end
		# by itself, so that its input counts as sent; with the pipe's read end closed
		# here, one still waiting ends at once, unless a process left behind holds it.
		if [ "$I" = 1 ]; then
			for ((i = 0; i < 10; i++)); do
				writer || break
				read -t 0.05 -u 9
			done
			writer && kill -KILL "$wp" 2>/dev/null
		fi
		# A process the command left behind may still hold its output open: when it
		# still does 0.2 s later, it and the rest of the group go on as a job of their
		# own (handover), without the timeout; failing that, they are noted and
		# killed at the timeout. Others (detached, or with their output redirected)
		# live on. One scan can miss processes that live for moments (a command that
		# forks and exits, over and over): while the group lives on and a scan finds
		# no process of it that stays without the output, the scan is repeated, and
		# after 2 s the leftovers count as holding it.
		held=
		if kill -0 -- "-$c" 2>/dev/null; then
			seen=
			for ((i = 0; i < 20; i++)); do
				held= quiet=
				for p in /proc/[0-9]*; do
					if holds "$p"; then
						held=${p#/proc/} seen=$held
						break
					fi
					# Read after the check: a member still there had no output open.
					[ -z "$quiet" ] && pstat "$p" && [ "$pgrp" = "$c" ] && [ "$pstate" != Z ] && quiet=1
				done
				if [ -z "$held" ]; then
					[ -n "$quiet" ] && break
					kill -0 -- "-$c" 2>/dev/null || break
					held=${seen:-$c}
				elif ((i >= 2)); then
					break
				fi
				read -t 0.1 -u 9
			done
			[ -n "$held" ] && handover "$held" && held= w=
			[ -n "$held" ] && echo "$held" >"$d.held"
		fi
		[ -z "$held" ] && [ -n "$w" ] && kill "$w"
		echo "$e $EPOCHREALTIME" >"$d.exit"
	) </dev/null >/dev/null 2>&1 &
	r=$!
	[ "$inp" = /dev/null ] || exec 3<&-
	rm=$r
	pstart "$r" && rm=$r:$pst
	# The listing shows the first 300 bytes of the command (not characters, whatever
	# the locale), from the file for a long one.
	preview
	printf '%s %s %s %s %s\n%s\n' "$t0" "$T" "$I" "$rm" "$cwd" "$P" >"$d.meta"
	state=running
	if [ "$W" = -1 ]; then
		wait "$r"
		state=done
	elif [ "$W" != 0 ]; then
		(read -t "$W" -u 9) &
		t=$!
		wait -n -p which "$r" "$t"
		if [ "$which" = "$r" ]; then
			kill "$t" 2>/dev/null
			state=done
		fi
	fi
	# The call waiting for this answer was cancelled (.cancelled): it reaches nobody,
	# so the output stays for the next job_output.
	keep=
	[ -e "$d.cancelled" ] && keep=keep
	emit "$state" "$H" "$TL" $keep
	;;
watch)
	# watch <dir> <id> <pgid>: the runner of a job handed over (see handover): it ends
	# when no process of the group runs and none holds the output. Their exit codes
	# are not known: 0, or 137 when killed. A group that keeps the container at its
	# process limit (a fork bomb) leaves nothing else able to start, job_kill
	# included: after 3 s of it, it is killed.
	# Its files are links to those of the job it took over from (delivered offsets
	# shared), made once the container has room for the processes that make them.
	tick
	f=0 linked=
	read -r o <"$d.from"
	[[ $o =~ ^j[0-9a-f]{12}$ ]] || o=$id
	links() { ln -f "$J/$o.out" "$d.out" && ln -f "$J/$o.err" "$d.err" && ln -f "$J/$o.off" "$d.off"; linked=1; }
	full "$4" || links
	while members "$4"; do
		if full "$4"; then
			((++f >= 10)) && killjob
		else
			f=0
			[ -n "$linked" ] || links
		fi
		read -t 0.3 -u 9
	done
	[ -n "$linked" ] || links
	e=0
	[ -e "$d.killed" ] || ((f >= 10)) && e=137
	echo "$e $EPOCHREALTIME" >"$d.exit"
	;;
poll)
	# poll <dir> <id> <wait s> <head> <tail> <input: env|-> [again]; input comes in
	# MCP_SANDBOX_INPUT; again: the last delivery did not arrive, send it again
	W=$4 H=$5 TL=$6 insent=
	if ! [ -e "$d.meta" ]; then
		echo "MCPJOB1 unknown"
		exit 0
	fi
	if [ "$8" = again ] && read -r a b c e 2>/dev/null <"$d.prev" && read -r x y 2>/dev/null <"$d.off" &&
		[ "$c $e" = "$x $y" ]; then
		echo "$a $b" >"$d.off"
	fi
	tick
	if [ "$7" = env ]; then
		if ! [ -p "$d.in" ]; then
			echo "MCPJOB1 notinteractive"
			exit 0
		fi
		if [ -s "$d.exit" ]; then
			emit done "$H" "$TL"
			exit 0
		fi
		# A process of its own writes the input, so no call waits for a program that
		# does not read: the pipe takes 64 KiB, the writer holds the rest of one input,
		# and more input is refused while it waits. Its write end alone (a reopen of the
		# FIFO, which the runner holds open for reading) fails once nobody can read.
		if writer; then
			echo "MCPJOB1 inputwaiting"
			exit 0
		fi
		# A subshell starts the writer, names it in .inw and, once it has written all of
		# the input, leaves .ins: the answer then says the input was sent, even when the
		# job ended on it (at the job's end its runner kills only a writer that has not
		# ended 0.5 s later). The subshell is disowned and its stderr is /dev/null, so no
		# "Killed" notice about the writer reaches this script's stderr, which carries
		# the job's output.
		rm -f "$d.ins"
		exec 3<>"$d.in" 4>"/proc/self/fd/3" 3<&-
		(
			bash -c 'printf %s "$MCP_SANDBOX_INPUT" >&4' mcpjob-input "$id" &
			echo "$!" >"$d.inw"
			exec 4>&-
			wait "$!" && : >"$d.ins"
		) </dev/null >/dev/null 2>&1 9<&- &
		w=$!
		disown "$w"
		insent=1
		exec 4>&-
		unset MCP_SANDBOX_INPUT
		# Most input fits in the pipe at once; give the writer a moment before the
		# answer says whether it is still waiting.
		for ((i = 0; i < 20; i++)); do
			pstat "/proc/$w" && [ "$pstate" != Z ] || break
			read -t 0.05 -u 9
		done
	fi
	read -r oo eo 2>/dev/null <"$d.off"
	oo=${oo:-0} eo=${eo:-0}
	# Wait for the end or the wait's end; after input, only until the answer comes and
	# 0.6 s more to gather it.
	seen=-1
	[ -s "$d.exit" ] || alive || W=0
	for ((i = 0; i < W * 5; i++)); do
		[ -s "$d.exit" ] && break
		if [ "$7" = env ] && ((seen < 0)); then
			set -- $(stat -c %s "$d.out" "$d.err" 2>/dev/null)
			if ((${1:-0} > oo || ${2:-0} > eo)); then seen=$i; fi
		fi
		((seen >= 0 && i - seen >= 3)) && break
		read -t 0.2 -u 9
	done
	if [ -s "$d.exit" ]; then
		emit done "$H" "$TL"
	elif alive; then
		emit running "$H" "$TL"
	else
		emit lost "$H" "$TL"
	fi
	;;
peek)
	# peek <dir> <id> <out from> <err from> <max>: the last max bytes of each stream's
	# output past the offsets ("-": past what was delivered), for live progress;
	# nothing is marked delivered.
	o=$4 e=$5 M=$6 os=0 es=0
	if [ "$o" = - ]; then
		read -r o e 2>/dev/null <"$d.off"
		[[ $o =~ ^[0-9]{1,15}$ && $e =~ ^[0-9]{1,15}$ ]] || o=0 e=0
	fi
	if [ -s "$d.out" ] || [ -s "$d.err" ]; then
		set -- $(stat -c %s "$d.out" "$d.err" 2>/dev/null)
		os=${1:-0} es=${2:-0}
	fi
	echo "MCPJOB1 peek $os $es"
	((os - o > M)) && o=$((os - M))
	((es - e > M)) && e=$((es - M))
	((os > o)) && range "$d.out" "$o" $((os - o))
	((es > e)) && range "$d.err" "$e" $((es - e)) >&2
	;;
kill)
	# kill <dir> <id> <head> <tail> <why: killed|cancelled>; the answer to a cancelled
	# call reaches nobody, so its output stays for the next job_output.
	H=$4 TL=$5 why=killed keep=
	[ "$6" = cancelled ] && why=cancelled keep=keep
	if ! [ -e "$d.meta" ]; then
		echo "MCPJOB1 unknown"
		exit 0
	fi
	tick
	# Processes left holding the output of an ended command (.held) are killed too.
	if ! [ -s "$d.exit" ] || { [ -s "$d.held" ] && ! [ -e "$d.timedout" ]; }; then
		: >"$d.$why"
		killjob
		for ((i = 0; i < 50; i++)); do
			[ -s "$d.exit" ] && break
			read -t 0.1 -u 9
		done
		killjob
	fi
	if [ -s "$d.exit" ]; then
		emit done "$H" "$TL" $keep
	elif alive; then
		emit running "$H" "$TL" $keep
	else
		emit lost "$H" "$TL" $keep
	fi
	;;
list)
	# list <dir> -: one line per job: id state exit start timeout interactive why, then
	# the command's first line; why is what killed it (timedout, killed, cancelled) or -
	for m in "$J"/*.meta; do
		[ -e "$m" ] || continue
		j=${m##*/}
		j=${j%.meta}
		{ read -r start to inter r cwd && IFS= read -r cmd; } <"$m"
		ex=-
		if [ -s "$J/$j.exit" ]; then
			read -r ex _ <"$J/$j.exit"
			st=done
		else
			st=lost
			runs "$r" "$j" && st=running
		fi
		why=-
		for w in cancelled killed timedout; do
			[ -e "$J/$j.$w" ] && why=$w && break
		done
		printf 'JOB %s %s %s %s %s %s %s %s\n' "$j" "$st" "$ex" "${start%[.,]*}" "$to" "$inter" "$why" "${cmd:0:300}"
	done
	;;
prune)
	# Finished jobs, most recently finished first: keep the newest 20, and any that
	# finished in the last 10 minutes (their output may just have been handed out), as
	# long as they are under a day old and their output stays under 1 GB in total.
	now=${EPOCHSECONDS}
	gone=()
	total=0 k=0
	while read -r t x; do
		[ -n "$x" ] || continue
		k=$((k + 1))
		age=$((now - t))
		if ((age > 86400 || (k > 20 && age > 600) || total > 1073741824)); then
			gone+=("${x%.exit}".*)
			continue
		fi
		set -- $(stat -c %s "${x%.exit}.out" "${x%.exit}.err" 2>/dev/null)
		total=$((total + ${1:-0} + ${2:-0}))
	done < <(stat -c '%Y %n' "$J"/*.exit 2>/dev/null | sort -rn)
	# Jobs whose runner is gone (the container restarted) are dropped after a day.
	for m in "$J"/*.meta; do
		[ -e "$m" ] || continue
		j=${m##*/}
		j=${j%.meta}
		[ -e "$J/$j.exit" ] && continue
		id=$j d=$J/$j
		alive && continue
		(((now - 16#${j:1:8}) > 86400)) && gone+=("$J/$j".*)
	done
	((${#gone[@]})) && rm -f -- "${gone[@]}"
	;;
esac
}

# A spare runner is started ahead of need, with `spare` as its only argument; its
# environment and arguments then come on stdin as NUL-ended fields: the number of
# environment entries, the entries, the number of arguments, the arguments. What
# follows on stdin is the mode's own input.
if [ "$1" = spare ]; then
	IFS= read -r -d '' n && [[ $n =~ ^[0-9]{1,4}$ ]] || exit 0
	for ((i = 0; i < n; i++)); do
		IFS= read -r -d '' kv || exit 0
		export "$kv"
	done
	IFS= read -r -d '' n && [[ $n =~ ^[0-9]{1,4}$ ]] || exit 0
	args=()
	for ((i = 0; i < n; i++)); do
		IFS= read -r -d '' a || exit 0
		args+=("$a")
	done
	set -- "${args[@]}"
	unset args kv n i
fi
main "$@"
exit 0
