// Package control is the channel between a running recording and
// `trueprof ctl`: one Unix socket per session in a directory only its
// user can enter, peer credentials checked on every connection, and
// small JSON requests and answers, one per packet.
//
// The recorder serves:
//
//	srv, err := control.Listen(control.Info{PID: os.Getpid(), Target: argv}, handler)
//	defer srv.Close()
//
// and ctl calls it:
//
//	dir, _ := control.Dir()
//	info, err := control.Find(dir, "") // the only session, or an error listing them
//	ans, err := control.Call(info, control.Request{Cmd: control.CmdStatus}, nil)
//
// docs/control.md describes the commands and the security model.
package control
