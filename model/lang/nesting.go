package lang

import (
	"bytes"
	"unicode/utf8"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
)

// HCL's parser and evaluator recurse once or more for each level of
// nesting, and Go ends a program whose stack passes 1 GB (a fatal error, not
// a panic): a model of 100,000 nested parentheses would crash the process.
// So every source is scanned before it is parsed, without allocating, for
// an upper bound of the depth the parser will reach:
//
//   - each open bracket, string, heredoc, interpolation and template
//     directive (%{ if }, %{ for }) is a level;
//   - each operator chained at one level (a + b + c, !!x, a ? b : c ? …)
//     and each index or call applied to an operand (a[b][c]) adds one,
//     since the parser builds such chains as nested nodes; a comma, an =, a
//     => or a new line of a body ends the chain.
//
// The scanner follows the modes of hclsyntax's lexer (code, quoted
// strings with their escapes, heredocs, template files, comments) so that
// text it takes for a string or a comment is one to the parser too. It
// also counts tokens (parsing costs memory per token) and refuses number
// literals too long to read in reasonable time.

// scanKind is what a source holds.
type scanKind int

const (
	scanConfig     scanKind = iota // a model file
	scanTemplate                   // a template file (templatefile)
	scanExpression                 // one expression (--var)
)

// scanResult is what scanSource found.
type scanResult struct {
	tokens  int
	deepest int             // the greatest depth reached
	diag    *hcl.Diagnostic // the depth or number limit was passed
}

// scanSource scans src before parsing (see above): a source nesting
// deeper than maxDepth, or with a number literal longer than
// maxNumberLength, gets a diagnostic at the place the limit was passed.
func scanSource(src []byte, filename string, kind scanKind, maxDepth int) scanResult {
	s := &srcScanner{src: src, max: maxDepth}
	if !s.run(kind) {
		// Code that is not ASCII: only hclsyntax's own lexer knows which
		// bytes its identifiers take; let it tokenize.
		return scanTokens(src, filename, kind, maxDepth)
	}
	out := scanResult{tokens: s.tokens, deepest: s.deepest}
	out.deepest = s.deepest
	if s.at >= 0 {
		out.diag = scanDiag(src, filename, s.at, s.what, maxDepth)
	}
	return out
}

func scanDiag(src []byte, filename string, at int, what string, maxDepth int) *hcl.Diagnostic {
	pos := position(src, at)
	rng := &hcl.Range{Filename: filename, Start: pos, End: hcl.Pos{Line: pos.Line, Column: pos.Column + 1, Byte: pos.Byte + 1}}
	if what == "number" {
		return errorf(rng, "Number too long",
			"a number has at most %d characters: reading a longer one costs too much time", maxNumberLength)
	}
	return errorf(rng, "Nesting too deep",
		"the expression nests more than %d levels deep here (brackets, strings, interpolations, template directives and chained operators each count; Options.MaxNesting): compute inner parts in locals", maxDepth)
}

// position is the line and column of byte offset at of src.
func position(src []byte, at int) hcl.Pos {
	at = min(at, len(src))
	line := 1 + bytes.Count(src[:at], []byte{'\n'})
	start := bytes.LastIndexByte(src[:at], '\n') + 1
	return hcl.Pos{Line: line, Column: 1 + utf8.RuneCount(src[start:at]), Byte: at}
}

// level is an open construct of the scanned source.
type level struct {
	kind    byte // '(' '[' '{' brackets; 'R' a model file's body; 'E' an expression; '$' interpolation; '%' directive; '"' string; 'H' heredoc; 'T' template file
	chain   int  // operators and postfix steps chained at this level
	dirs    int  // open %{ if } and %{ for } directives of a template level
	operand bool // the last token at this level ended an operand
	marker  []byte
	sol     bool // heredoc: at the start of a line
}

type srcScanner struct {
	src    []byte
	max    int
	i      int
	start  int // where the token being scanned starts
	tokens int

	levels  []level
	frames  []int // indices in levels of the frames: 'R' '$' '%' '"' 'H' 'T'
	depth   int   // len(levels) + chains + directives
	deepest int

	// the brace bookkeeping of hclsyntax's lexer, which decides whether a
	// } ends an interpolation or an object
	braces    int
	retBraces []int

	at   int // where a limit was passed, or -1
	what string
}

func (s *srcScanner) top() *level   { return &s.levels[len(s.levels)-1] }
func (s *srcScanner) frame() *level { return &s.levels[s.frames[len(s.frames)-1]] }

func (s *srcScanner) fail(at int, what string) {
	if s.at < 0 {
		s.at, s.what = at, what
	}
}

func (s *srcScanner) deeper(n int) {
	s.depth += n
	s.deepest = max(s.deepest, s.depth)
	if s.depth > s.max {
		s.fail(s.start, "depth")
	}
}

func (s *srcScanner) push(kind byte) {
	s.levels = append(s.levels, level{kind: kind})
	switch kind {
	case 'R', 'E', '$', '%', '"', 'H', 'T':
		s.frames = append(s.frames, len(s.levels)-1)
	}
	s.deeper(1)
}

func (s *srcScanner) pop() {
	l := s.top()
	s.depth -= 1 + l.chain + l.dirs
	if len(s.frames) > 0 && s.frames[len(s.frames)-1] == len(s.levels)-1 {
		s.frames = s.frames[:len(s.frames)-1]
	}
	s.levels = s.levels[:len(s.levels)-1]
}

// chain adds a chained step to the innermost level.
func (s *srcScanner) chain() {
	s.top().chain++
	s.deeper(1)
}

// reset ends the chain of the innermost level.
func (s *srcScanner) reset() {
	l := s.top()
	s.depth -= l.chain
	l.chain = 0
	l.operand = false
}

// root opens the level of the whole source.
func (s *srcScanner) root(kind scanKind) {
	s.at = -1
	switch kind {
	case scanTemplate:
		s.push('T')
	case scanExpression:
		s.push('E')
	default:
		s.push('R')
	}
}

// run scans the source; false means the exact lexer must decide.
func (s *srcScanner) run(kind scanKind) bool {
	s.root(kind)
	for s.i < len(s.src) && s.at < 0 {
		s.start = s.i
		var ok bool
		switch s.frame().kind {
		case '"':
			s.stringStep()
			ok = true
		case 'H':
			s.heredocStep()
			ok = true
		case 'T':
			s.templateStep()
			ok = true
		default:
			ok = s.codeStep()
		}
		if !ok {
			return false
		}
	}
	return true
}

func isDigit(b byte) bool { return '0' <= b && b <= '9' }

func isIdentStart(b byte) bool {
	return b == '_' || 'a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || b >= 0x80
}

func isIdentByte(b byte) bool { return isIdentStart(b) || isDigit(b) || b == '-' }

func (s *srcScanner) peek(off int) byte {
	if s.i+off < len(s.src) {
		return s.src[s.i+off]
	}
	return 0
}

// codeStep scans one token of code.
func (s *srcScanner) codeStep() bool {
	b := s.src[s.i]
	l := s.top()
	switch {
	case b == ' ' || b == '\t':
		s.i++
		return true
	case isDigit(b):
		start := s.i
		s.i++
		for s.i < len(s.src) {
			c := s.src[s.i]
			switch {
			case isDigit(c) || c == '.':
				s.i++
				continue
			case (c == 'e' || c == 'E') && (isDigit(s.peek(1)) || (s.peek(1) == '+' || s.peek(1) == '-') && isDigit(s.peek(2))):
				s.i += 2
				continue
			}
			break
		}
		if s.i-start > maxNumberLength {
			s.fail(start, "number")
		}
		s.tokens++
		s.top().operand = true
		return true
	case b >= 0x80:
		// hclsyntax's lexer decides with its Unicode tables which bytes
		// make an identifier (a broken sequence may even swallow a quote):
		// code that is not ASCII is left to it.
		return false
	case isIdentStart(b):
		for s.i < len(s.src) && isIdentByte(s.src[s.i]) {
			if s.src[s.i] >= 0x80 {
				return false
			}
			s.i++
		}
		s.tokens++
		s.top().operand = true
		return true
	case b == '#' || b == '/' && s.peek(1) == '/':
		end := bytes.IndexByte(s.src[s.i:], '\n')
		s.tokens++
		if end < 0 {
			s.i = len(s.src)
			return true
		}
		s.i += end + 1
		s.newline() // the parser takes a line comment's end for a new line
		return true
	case b == '/' && s.peek(1) == '*':
		if end := bytes.Index(s.src[s.i+2:], []byte("*/")); end >= 0 {
			s.i += 2 + end + 2
			s.tokens++
			return true
		}
		// Unterminated: hclsyntax's lexer reads it as / * and code.
	case b == '\n' || b == '\r' && s.peek(1) == '\n':
		if b == '\r' {
			s.i++
		}
		s.i++
		s.tokens++
		s.newline()
		return true
	case b == '"':
		s.i++
		s.tokens++
		s.push('"')
		return true
	case b == '<' && s.peek(1) == '<':
		if ok, isHeredoc := s.heredocStart(); !ok {
			return false
		} else if isHeredoc {
			return true
		}
	case b == '{':
		s.i++
		s.tokens++
		s.braces++
		l.operand = false
		s.push('{')
		return true
	case b == '}' || b == '~' && s.peek(1) == '}':
		s.tokens++
		tilde := b == '~'
		if tilde {
			s.i++
		}
		s.i++
		if n := len(s.retBraces); n > 0 && s.retBraces[n-1] == s.braces {
			s.braces--
			s.retBraces = s.retBraces[:n-1]
			s.endFrame()
			return true
		}
		s.braces--
		// A ~} that ends no interpolation is no } to the parser: the
		// object stays open.
		if l.kind == '{' && !tilde {
			s.pop()
		}
		s.top().operand = true
		return true
	case b == '(' || b == '[':
		s.i++
		s.tokens++
		if l.operand {
			s.chain()
		}
		l = s.top()
		l.operand = false
		s.push(b)
		return true
	case b == ')' || b == ']':
		s.i++
		s.tokens++
		want := byte('(')
		if b == ']' {
			want = '['
		}
		if l.kind == want {
			s.pop()
		}
		s.top().operand = true
		return true
	case b == ',':
		s.i++
		s.tokens++
		s.reset()
		return true
	case b == '=':
		s.tokens++
		switch s.peek(1) {
		case '=': // ==
			s.i += 2
			s.chain()
			s.top().operand = false
		case '>': // =>
			s.i += 2
			s.reset()
		default:
			s.i++
			s.reset()
		}
		return true
	case b == '.' && s.peek(1) == '.' && s.peek(2) == '.':
		s.i += 3
		s.tokens++
		return true
	case b == '.':
		s.i++
		s.tokens++
		return true
	case b == ':' && s.peek(1) != ':':
		s.i++
		s.tokens++
		l.operand = false
		return true
	}
	// Operators and every other single character: ! != < <= > >= && || + -
	// * / % ? & | ^ ; ` ' and the like. Two-character operators count once.
	switch {
	case (b == '!' || b == '<' || b == '>') && s.peek(1) == '=',
		b == '&' && s.peek(1) == '&', b == '|' && s.peek(1) == '|', b == ':' && s.peek(1) == ':':
		s.i += 2
	default:
		s.i++
	}
	s.tokens++
	s.chain()
	s.top().operand = false
	return true
}

// newline ends the chain in a model file's body and in objects, where a
// new line ends an expression; inside ( ) [ ], interpolations and a lone
// expression the parser skips it.
func (s *srcScanner) newline() {
	if l := s.top(); l.kind == '{' || l.kind == 'R' {
		s.reset()
	}
}

// heredocStart scans <<ID or <<-ID and the new line after it. isHeredoc
// is false when it is not one (then < < are operators); ok is false when
// the identifier is not ASCII and the exact lexer must decide.
func (s *srcScanner) heredocStart() (ok, isHeredoc bool) {
	j := s.i + 2
	if j < len(s.src) && s.src[j] == '-' {
		j++
	}
	start := j
	if j >= len(s.src) || !isIdentStart(s.src[j]) {
		return true, false
	}
	for j < len(s.src) && isIdentByte(s.src[j]) {
		if s.src[j] >= 0x80 {
			return false, false
		}
		j++
	}
	marker := s.src[start:j]
	switch {
	case j < len(s.src) && s.src[j] == '\n':
		j++
	case j+1 < len(s.src) && s.src[j] == '\r' && s.src[j+1] == '\n':
		j += 2
	default:
		return true, false
	}
	s.i = j
	s.tokens++
	s.push('H')
	h := s.frame()
	h.marker, h.sol = marker, true
	return true, true
}

// endFrame closes the innermost interpolation or directive with whatever
// brackets are still open in it.
func (s *srcScanner) endFrame() {
	for len(s.levels) > 1 {
		k := s.top().kind
		s.pop()
		if k == '$' || k == '%' {
			break
		}
	}
}

// interp scans ${ or %{ (with an optional ~) inside a template.
func (s *srcScanner) interp(control bool) {
	s.i += 2
	if s.peek(0) == '~' {
		s.i++
	}
	s.tokens++
	s.braces++
	s.retBraces = append(s.retBraces, s.braces)
	tmpl := s.frames[len(s.frames)-1]
	if !control {
		s.push('$')
		return
	}
	s.push('%')
	// The directive's keyword decides whether it opens or closes a level;
	// one that cannot be read here counts as opening (the safe side).
	j := s.i
	for j < len(s.src) && (s.src[j] == ' ' || s.src[j] == '\t' || s.src[j] == '\n' || s.src[j] == '\r') {
		j++
	}
	k := j
	for k < len(s.src) && isIdentByte(s.src[k]) {
		k++
	}
	s.directive(tmpl, string(s.src[j:k]))
}

// directive opens or closes a directive level of template level tmpl.
func (s *srcScanner) directive(tmpl int, keyword string) {
	t := &s.levels[tmpl]
	switch keyword {
	case "else":
	case "endif", "endfor":
		if t.dirs > 0 {
			t.dirs--
			s.depth--
		}
	default:
		t.dirs++
		s.deeper(1)
	}
}

// templateDollar handles $ and % inside a template: an interpolation,
// an escaped $${ or %%{, or the character itself. It reports whether it
// consumed anything.
func (s *srcScanner) templateDollar() bool {
	b := s.src[s.i]
	if b != '$' && b != '%' {
		return false
	}
	switch {
	case s.peek(1) == '{':
		s.interp(b == '%')
	case s.peek(1) == b && s.peek(2) == '{':
		s.i += 3
		if s.peek(0) == '~' {
			s.i++
		}
		s.tokens++
	default:
		s.i++
		s.tokens++
	}
	return true
}

func (s *srcScanner) stringStep() {
	b := s.src[s.i]
	switch {
	case b == '"':
		s.i++
		s.tokens++
		s.pop()
		s.top().operand = true
		return
	case b == '\\':
		s.i++
		if s.i < len(s.src) && s.src[s.i] != '\n' && s.src[s.i] != '\r' {
			s.i++
		}
		return
	case s.templateDollar():
		return
	}
	// A run of literal text.
	for s.i < len(s.src) {
		c := s.src[s.i]
		if c == '"' || c == '\\' || c == '$' || c == '%' {
			break
		}
		s.i++
	}
	s.tokens++
}

// heredocStep scans a heredoc. Its closing marker must fill a line read
// as one token, so a line with an interpolation or a $ or % does not end
// it: sol is true at the start of a line, false once a line was split.
func (s *srcScanner) heredocStep() {
	h := s.frame()
	b := s.src[s.i]
	if b == '$' || b == '%' {
		if s.peek(1) == '{' {
			h.sol = false
			s.templateDollar()
			return // the heredoc continues mid-line after it
		}
		s.templateDollar()
		// A literal $ or %: a new line right after it ends its token.
		switch {
		case s.peek(0) == '\n':
			s.i++
			h.sol = true
		case s.peek(0) == '\r' && s.peek(1) == '\n':
			s.i += 2
			h.sol = true
		default:
			h.sol = false
		}
		return
	}
	// A run of literal text, to the end of the line or the next $ or %.
	start := s.i
	for s.i < len(s.src) {
		c := s.src[s.i]
		if c == '$' || c == '%' || c == '\n' || c == '\r' && s.peek(1) == '\n' {
			break
		}
		s.i++
	}
	s.tokens++
	if s.i >= len(s.src) || s.src[s.i] == '$' || s.src[s.i] == '%' {
		h.sol = false
		return
	}
	if s.src[s.i] == '\r' {
		s.i++
	}
	s.i++ // the new line
	if h.sol && bytes.Equal(bytes.TrimSpace(s.src[start:s.i]), h.marker) {
		s.pop()
		s.top().operand = true
		s.newline() // the lexer gives the new line after the marker
		return
	}
	h.sol = true
}

func (s *srcScanner) templateStep() {
	if s.templateDollar() {
		return
	}
	for s.i < len(s.src) && s.src[s.i] != '$' && s.src[s.i] != '%' {
		s.i++
	}
	s.tokens++
}

// scanTokens computes scanSource's bound from hclsyntax's own tokens: the
// exact modes, at the cost of allocating them.
func scanTokens(src []byte, filename string, kind scanKind, maxDepth int) scanResult {
	var toks hclsyntax.Tokens
	switch kind {
	case scanTemplate:
		toks, _ = hclsyntax.LexTemplate(src, filename, hcl.Pos{Line: 1, Column: 1})
	case scanExpression:
		toks, _ = hclsyntax.LexExpression(src, filename, hcl.Pos{Line: 1, Column: 1})
	default:
		toks, _ = hclsyntax.LexConfig(src, filename, hcl.Pos{Line: 1, Column: 1})
	}
	s := &srcScanner{max: maxDepth}
	s.root(kind)
	out := scanResult{tokens: len(toks)}
	for i, t := range toks {
		s.start = t.Range.Start.Byte
		l := s.top()
		operand := false
		switch t.Type {
		case hclsyntax.TokenNumberLit:
			if len(t.Bytes) > maxNumberLength {
				s.fail(s.i, "number")
			}
			operand = true
		case hclsyntax.TokenIdent:
			operand = true
		case hclsyntax.TokenOParen, hclsyntax.TokenOBrack:
			if l.operand {
				s.chain()
			}
			s.push(byte(t.Type))
		case hclsyntax.TokenOBrace:
			s.push('{')
		case hclsyntax.TokenCParen, hclsyntax.TokenCBrack, hclsyntax.TokenCBrace:
			want := map[hclsyntax.TokenType]byte{hclsyntax.TokenCParen: '(', hclsyntax.TokenCBrack: '[', hclsyntax.TokenCBrace: '{'}[t.Type]
			if l.kind == want {
				s.pop()
			}
			operand = true
		case hclsyntax.TokenOQuote:
			s.push('"')
		case hclsyntax.TokenOHeredoc:
			s.push('H')
		case hclsyntax.TokenCQuote, hclsyntax.TokenCHeredoc:
			if k := s.frame().kind; k == '"' || k == 'H' {
				s.pop()
			}
			operand = true
		case hclsyntax.TokenTemplateInterp:
			s.push('$')
		case hclsyntax.TokenTemplateControl:
			tmpl := s.frames[len(s.frames)-1]
			s.push('%')
			keyword := ""
			for _, next := range toks[i+1:] {
				if next.Type != hclsyntax.TokenNewline {
					if next.Type == hclsyntax.TokenIdent {
						keyword = string(next.Bytes)
					}
					break
				}
			}
			s.directive(tmpl, keyword)
		case hclsyntax.TokenTemplateSeqEnd:
			if k := s.frame().kind; k == '$' || k == '%' {
				s.endFrame()
			}
			operand = true
		case hclsyntax.TokenComma, hclsyntax.TokenEqual, hclsyntax.TokenFatArrow:
			s.reset()
		case hclsyntax.TokenNewline:
			s.newline()
		case hclsyntax.TokenComment:
			if bytes.HasSuffix(t.Bytes, []byte{'\n'}) {
				s.newline()
			}
		case hclsyntax.TokenStar, hclsyntax.TokenSlash, hclsyntax.TokenPlus, hclsyntax.TokenMinus,
			hclsyntax.TokenPercent, hclsyntax.TokenEqualOp, hclsyntax.TokenNotEqual, hclsyntax.TokenLessThan,
			hclsyntax.TokenLessThanEq, hclsyntax.TokenGreaterThan, hclsyntax.TokenGreaterThanEq,
			hclsyntax.TokenAnd, hclsyntax.TokenOr, hclsyntax.TokenBang, hclsyntax.TokenQuestion,
			hclsyntax.TokenBitwiseAnd, hclsyntax.TokenBitwiseOr, hclsyntax.TokenBitwiseNot,
			hclsyntax.TokenBitwiseXor, hclsyntax.TokenStarStar, hclsyntax.TokenDoubleColon:
			s.chain()
		}
		if len(s.levels) > 0 {
			s.top().operand = operand
		}
		if s.at >= 0 {
			break
		}
	}
	out.deepest = s.deepest
	if s.at >= 0 {
		out.diag = scanDiag(src, filename, s.at, s.what, maxDepth)
	}
	return out
}
