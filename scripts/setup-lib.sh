# setup-lib.sh: how scripts/setup.sh tells which Java and which system it runs on, and
# (scripts/stack/pgbin.sh) which PostgreSQL server. Only definitions: sourcing it runs
# nothing.
#
# SETUP_FS_ROOT (tests only) is put in front of every absolute path probed
# (/etc/os-release and the usual PostgreSQL places), SETUP_UNAME replaces `uname -s`:
# together they let a test play Fedora, Arch or macOS on any machine.

source "$(dirname "${BASH_SOURCE[0]}")/stack/pgbin.sh"

# Kafka 4 needs Java 17 or newer.
JAVA_MIN=17

# java_major prints the major version of the java on PATH ("1.8.0_392" is 8). macOS has
# a /usr/bin/java that only says no runtime is installed: that fails here too.
java_major() {
	local out
	out="$(java -version 2>&1)" || return 1
	[[ "$out" =~ version\ \"([0-9]+)(\.([0-9]+))? ]] || return 1
	if [[ "${BASH_REMATCH[1]}" == 1 ]]; then
		echo "${BASH_REMATCH[3]}"
	else
		echo "${BASH_REMATCH[1]}"
	fi
}

# os_family prints debian, fedora, arch, macos or other: which package manager's names
# and commands setup.sh prints. ID decides first, then ID_LIKE (Ubuntu and Mint are
# debian, Rocky and Alma are fedora through "rhel", Manjaro is arch).
os_family() {
	local kernel ids word
	kernel="${SETUP_UNAME:-$(uname -s)}"
	case "$kernel" in
	Darwin) echo macos; return ;;
	Linux) ;;
	*) echo other; return ;;
	esac
	ids="$(
		ID= ID_LIKE=
		# shellcheck disable=SC1091 # os-release is shell syntax by specification.
		source "${SETUP_FS_ROOT:-}/etc/os-release" 2>/dev/null
		echo "$ID $ID_LIKE"
	)"
	for word in $ids; do
		case "$word" in
		debian | ubuntu) echo debian; return ;;
		fedora | rhel | centos) echo fedora; return ;;
		arch) echo arch; return ;;
		esac
	done
	echo other
}
