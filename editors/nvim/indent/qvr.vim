" Indentation for QVR (spec section 1.7): a block opens after a `program`,
" `deduction`, `marginalize` or `lexicon` header and after an unclosed bracket;
" `return` ends a program; top-level declarations start at column 1. Where a
" block ends without a marker (after a marginalize body, a lexicon, a deduction),
" the indent of the previous line is kept and you dedent yourself, as in Python.
if exists('b:did_indent')
  finish
endif
let b:did_indent = 1

setlocal autoindent nosmartindent nolisp
setlocal indentexpr=GetQvrIndent(v:lnum)
setlocal indentkeys=!^F,o,O,0),0],0},0=object,0=morphism,0=program,0=deduction,0=composition,0=export
let b:undo_indent = 'setlocal autoindent< smartindent< lisp< indentexpr< indentkeys<'

if exists('*GetQvrIndent')
  finish
endif

let s:cpo_save = &cpo
set cpo&vim

" The code of a line: strings emptied, comments removed (`#[` pragmas stay:
" they are brackets), block comments on one line removed.
function! s:Code(lnum) abort
  let line = getline(a:lnum)
  let line = substitute(line, '"\%([^"\\]\|\\.\)*"\=', '""', 'g')
  let line = substitute(line, '#{.\{-}}#', '', 'g')
  return substitute(line, '#\%(!\=\[\)\@!.*$', '', '')
endfunction

" Openers minus closers on a line; `#[` counts as an opener.
function! s:Balance(lnum) abort
  let code = s:Code(a:lnum)
  return len(substitute(code, '[^[({]', '', 'g')) - len(substitute(code, '[^\])}]', '', 'g'))
endfunction

" The line where the bracket run that ends on `lnum` started, counting
" `depth` extra closers (closing brackets at the start of the current line).
function! s:RunStart(lnum, depth) abort
  let lnum = a:lnum
  let depth = a:depth + s:Balance(lnum)
  while depth < 0 && lnum > 1
    let lnum = prevnonblank(lnum - 1)
    let depth += s:Balance(lnum)
  endwhile
  return lnum
endfunction

function! GetQvrIndent(lnum) abort
  let line = getline(a:lnum)
  if line =~# '^\s*\%(object\|morphism\|program\|deduction\|composition\|export\)\>'
    return 0
  endif
  let prev = prevnonblank(a:lnum - 1)
  if prev == 0
    return 0
  endif
  " Inside a block comment the text is free: keep what is there (needs syntax on).
  if synIDattr(synID(prev, max([len(getline(prev)), 1]), 1), 'name') ==# 'qvrBlockComment'
        \ && getline(prev) !~# '}#\s*$'
    return -1
  endif
  " A line that starts with closing brackets lines up with the line that opened them.
  let closers = len(matchstr(line, '^\s*\zs[\])}]\+'))
  if closers > 0
    return indent(s:RunStart(prev, -closers))
  endif
  if s:Balance(prev) > 0
    return indent(prev) + shiftwidth()
  endif
  " The statement the previous line belongs to (it may have spanned several lines).
  let start = s:RunStart(prev, 0)
  let head = s:Code(start)
  if head =~# '^\%(program\|deduction\)\>' || head =~# '^\s\+\%(marginalize\>\|lexicon\s*$\)'
    return indent(start) + shiftwidth()
  endif
  if head =~# '^\s\+return\>'
    return 0
  endif
  return indent(start)
endfunction

let &cpo = s:cpo_save
unlet s:cpo_save
