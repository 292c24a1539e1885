package main

import (
	"context"
	"os"

	"softib/tools/isertarget"
)

func init() {
	register(&command{
		name:    "iser-target",
		summary: "iSER (iSCSI over RDMA) target serving file or memory LUNs to open-iscsi",
		run: func(args []string) int {
			return isertarget.Run(context.Background(), args, os.Stderr)
		},
	})
}
