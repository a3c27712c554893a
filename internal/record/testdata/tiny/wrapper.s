# The exec wrapper (launch.go), as wrapperCode in tiny_amd64.go has it;
# TestTinyCode assembles this file with GNU as and compares. On entry
# the stack holds argc, then argv (the target's path, then its argv),
# NULL, envp. It says on fd 3 that it runs, waits there for the byte
# that releases it, and execs the target. Fd 3 closes at a successful
# exec; when the exec fails, the errno goes to the recorder on it.
	.text
	.globl	_start
_start:
	mov	%rsp, %rbx
	sub	$0x10, %rsp
	movb	$0, (%rsp)
	mov	$44, %eax		# sendto(3, "\0", 1, MSG_NOSIGNAL, NULL, 0)
	mov	$3, %edi
	mov	%rsp, %rsi
	mov	$1, %edx
	mov	$0x4000, %r10d
	xor	%r8d, %r8d
	xor	%r9d, %r9d
	syscall
wait:
	xor	%eax, %eax		# read(3, %rsp, 1)
	mov	$3, %edi
	mov	%rsp, %rsi
	mov	$1, %edx
	syscall
	cmp	$-4, %rax		# -EINTR: again
	je	wait
	cmp	$1, %rax		# not the byte: exit_group(127)
	jne	fail
	mov	$72, %eax		# fcntl(3, F_SETFD, FD_CLOEXEC)
	mov	$3, %edi
	mov	$2, %esi
	mov	$1, %edx
	syscall
	mov	8(%rbx), %rdi		# execve(argv[0], &argv[1], envp)
	lea	16(%rbx), %rsi
	mov	(%rbx), %rcx
	lea	16(%rbx,%rcx,8), %rdx
	mov	$59, %eax
	syscall
	neg	%eax			# write(3, &errno, 4)
	mov	%eax, (%rsp)
	mov	$1, %eax
	mov	$3, %edi
	mov	%rsp, %rsi
	mov	$4, %edx
	syscall
fail:
	mov	$127, %edi
	mov	$231, %eax		# exit_group(127)
	syscall
