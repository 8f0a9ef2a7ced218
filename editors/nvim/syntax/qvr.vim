" Highlighting for QVR (qvr-language.md sections 1, 5, 9, 10), without the server.
" Group names start with `qvr`; each links to a standard group at the end.
if exists('b:current_syntax')
  finish
endif
let s:cpo_save = &cpo
set cpo&vim

syn case match
" Block comments may span many lines.
syn sync minlines=100

" --------------------------------------------------------------- comments
syn keyword qvrTodo contained TODO FIXME XXX NOTE
" `##` or `#!` (not `#![`): doc comment; `#{ }#`: block comment; `#[`: pragma.
syn match qvrComment "#\%([{[#]\|!\[\)\@!.*$" contains=qvrTodo,@Spell
syn match qvrDocComment "#\%(#\|!\[\@!\).*$" contains=qvrTodo,@Spell
syn region qvrBlockComment start="#{" end="}#" contains=qvrTodo,@Spell
syn region qvrPragma matchgroup=qvrPragmaDelimiter start="#!\=\[" end="\]"
      \ contains=qvrPragmaKey,qvrNumber,qvrFloat,qvrString,qvrOperator,qvrComment,qvrBlockComment
syn match qvrPragmaKey "\<\h\w*\>" contained

" --------------------------------------------------------------- literals
syn region qvrString start=+"+ skip=+\\.+ end=+"+ end=+$+ oneline contains=qvrEscape
syn match qvrEscape "\\." contained
syn match qvrNumber "\<\d\+\>"
syn match qvrFloat "\<\d\+\.\d\+\%([eE][+-]\=\d\+\)\=\>"
syn match qvrFloat "\<\d\+[eE][+-]\=\d\+\>"

" ----------------------------------------------------------- declarations
" The declared name follows its keyword (nextgroup); `let` at column 1 is a
" top-level declaration, indented it is a program step.
syn keyword qvrDeclaration object nextgroup=qvrTypeName skipwhite
syn keyword qvrDeclaration morphism program nextgroup=qvrFunctionName skipwhite
syn keyword qvrDeclaration deduction nextgroup=qvrDeductionName skipwhite
syn keyword qvrDeclaration composition nextgroup=qvrCompositionRule skipwhite
syn keyword qvrKeyword export
syn match qvrDeclaration "^let\>" nextgroup=qvrFunctionName skipwhite
syn match qvrTypeName "\h\w*" contained
syn match qvrFunctionName "\h\w*" contained
syn match qvrDeductionName "\h\w*" contained
syn match qvrCompositionRule "\h\w*" contained

" ------------------------------------------------------------------ steps
syn keyword qvrStep sample observe marginalize nextgroup=qvrLocalName skipwhite
syn keyword qvrStep score nextgroup=qvrLocalName skipwhite
syn keyword qvrStep return
syn match qvrStep "^\s\+\zslet\>" nextgroup=qvrLocalName skipwhite
syn match qvrLocalName "\h\w*" contained

" -------------------------------------------------------- deduction bodies
syn match qvrDeductionKeyword "^\s\+\zs\%(atoms\|binders\|lexicon\)\>"
syn match qvrDeductionKeyword "^\s\+\zsrule\>" nextgroup=qvrFunctionName skipwhite

" ------------------------------------------------------------ expressions
syn keyword qvrKeyword factor in as
syn keyword qvrCombinator fan stack repeat scan
syn keyword qvrBuiltinType FinSet Real
syn keyword qvrFamily Normal Cauchy Laplace Gumbel StudentT LogNormal HalfNormal
      \ HalfCauchy Exponential Gamma InverseGamma Chi2 Weibull Pareto FisherSnedecor
      \ Uniform TruncatedNormal Beta Kumaraswamy LogitNormal ContinuousBernoulli
      \ Categorical Bernoulli Poisson NegativeBinomial Geometric Dirichlet
      \ OneHotCategorical RelaxedBernoulli RelaxedOneHotCategorical LogisticNormal
      \ MultivariateNormal LowRankMVN GP Horseshoe Wishart InverseWishart MatrixNormal
      \ LKJCholesky Flow Binomial VonMises GeneralizedPareto
syn match qvrBuiltin "\<\%(exp\|log\|sqrt\|sigmoid\|parse\|compose\|identity\|from_data\|residual\|layer_norm\|rms_norm\)\ze\s*("
syn match qvrBuiltin "\.\zs\%(dagger\|goal_weight\)\>"

" Operators: later definitions win at the same position, so longer ones come last.
syn match qvrOperator "[-+*/=@~:]"
syn match qvrOperator "->\|<-\|>>\||-\|⊢"
syn match qvrOperator ">>>\|>=>\|||>\|&&>\|?>\|\*>\|\~>\|+>\|\$>\|%>\|<<"

" Brackets: option blocks `[key=value]` (and index brackets, which never hold `=`).
" A bracket run left open ends at the next top-level statement (spec 1.7 rule 1).
syn region qvrOptions matchgroup=qvrDelimiter start="\[" end="\]"
      \ end="^\ze\%(object\|morphism\|let\|program\|export\|composition\|deduction\)\>"
      \ contains=qvrOptions,qvrOptionKey,qvrRoleValue,qvrOptionValue,qvrComment,qvrDocComment,
      \qvrBlockComment,qvrPragma,qvrString,qvrNumber,qvrFloat,qvrOperator,qvrFamily,qvrBuiltin,
      \qvrCombinator,qvrBuiltinType,qvrKeyword
syn match qvrOptionKey "\<\h\w*\ze\s*=" contained
syn match qvrOptionKey "\<causal\>\ze\s*[,\]]" contained
syn match qvrRoleValue "\%(\<role\s*=\s*\)\@<=\%(latent\|observed\|kernel\|embed\|discretize\|let\|attention\)\>" contained
syn match qvrOptionValue "\%(\<\%(reduction\|semiring\|init\)\s*=\s*\)\@<=\%(logsumexp\|sum\|mean\|LogProb\|Viterbi\|Boolean\|Counting\|auto\)\>" contained

hi def link qvrTodo Todo
hi def link qvrComment Comment
hi def link qvrDocComment SpecialComment
hi def link qvrBlockComment Comment
hi def link qvrPragma PreProc
hi def link qvrPragmaDelimiter PreProc
hi def link qvrPragmaKey PreProc
hi def link qvrString String
hi def link qvrEscape SpecialChar
hi def link qvrNumber Number
hi def link qvrFloat Float
hi def link qvrDeclaration Keyword
hi def link qvrKeyword Keyword
hi def link qvrStep Statement
hi def link qvrDeductionKeyword Keyword
hi def link qvrTypeName Type
hi def link qvrFunctionName Function
hi def link qvrDeductionName Function
hi def link qvrCompositionRule Constant
hi def link qvrLocalName Identifier
hi def link qvrCombinator Keyword
hi def link qvrBuiltinType Type
hi def link qvrFamily Structure
hi def link qvrBuiltin Function
hi def link qvrOperator Operator
hi def link qvrDelimiter Delimiter
hi def link qvrOptionKey Identifier
hi def link qvrRoleValue Constant
hi def link qvrOptionValue Constant

let b:current_syntax = 'qvr'
let &cpo = s:cpo_save
unlet s:cpo_save
