autocmd BufRead,BufNewFile *.qvr setfiletype qvr
