" QVR source files. A Vim script ftdetect file works on every Neovim version
" (on 0.7, vim.filetype.add only takes effect with g:do_filetype_lua = 1).
autocmd BufRead,BufNewFile *.qvr setfiletype qvr
