// Package scripts has no Go code: it is the home of the project's shell scripts
// (setup.sh, the native stack under stack/, the checks make lint runs), and its tests run
// setup.sh the way a user's machine would, with the tools of each case on a PATH of
// their own.
package scripts
