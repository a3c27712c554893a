# The holder of closing events (closer.go), as holderCode in
# tiny_amd64.go has it; TestTinyCode assembles this file with GNU as and
# compares. It waits for its standard input to close, closes the events
# (every descriptor from 4: fd 3 is the teardown lock), and exits, which
# releases the lock last.
	.text
	.globl	_start
_start:
	sub	$0x40, %rsp
again:
	xor	%eax, %eax		# read(0, %rsp, 64)
	xor	%edi, %edi
	mov	%rsp, %rsi
	mov	$0x40, %edx
	syscall
	cmp	$-4, %rax		# -EINTR: again
	je	again
	test	%rax, %rax		# read something: again
	jg	again
	mov	$436, %eax		# close_range(4, ~0U, 0)
	mov	$4, %edi
	mov	$0xffffffff, %esi
	xor	%edx, %edx
	syscall
	test	%rax, %rax
	je	done
	mov	$4, %ebx		# before Linux 5.9: close(fd), fd 4 to 4095
close:
	mov	$3, %eax
	mov	%ebx, %edi
	syscall
	inc	%ebx
	cmp	$0x1000, %ebx
	jb	close
done:
	mov	$231, %eax		# exit_group(0)
	xor	%edi, %edi
	syscall
