"""The `.func` and `call` part of the PTX parser (see `parse`): a mixin of `parse._Parser`.

`.func [(.param ret)] name[(.param ...)] [.noreturn] { body }` is parsed like an entry (into an `Entry` whose
`returns` are the return parameters) and kept in `Module.functions`; a declaration without body ends in `;`
(`.extern` ones, such as `vprintf`, go to `Module.externs`). `call[.uni] [(ret, ...),] name[, (arg, ...)];`
becomes operands (Vector(returns), Symbol(name), Vector(arguments)); calls through a register or with a
prototype (indirect calls) are refused.
"""

from __future__ import annotations

from tessera.interpreters.ptx.syntax import Entry, Module, Operand, Symbol, Variable, Vector


class FunctionParser:
    """Methods of `parse._Parser` for functions and calls (they use its token methods and state)."""

    def parameter_list(self) -> list[Variable]:
        """`.param ..., .param ...)` after the '(' (already read), to the ')'."""
        params = []
        if not self.accept(")"):
            while True:
                params.append(self.parameter())
                if self.accept(")"):
                    break
                self.expect(",", "',' or ')' after a parameter")
        return params

    def function_definition(self, token, module: Module, extern: bool) -> None:
        """`.func [(.param ret)] name[(.param ...)] [.noreturn] { body }`, or `;` for a declaration."""
        self.entry_symbols = {}
        returns = self.parameter_list() if self.accept("(") else []
        name = self.expect("name", "the function name")
        params = self.parameter_list() if self.accept("(") else []
        while self.accept("directive", ".noreturn"):
            pass
        if name.text not in self.function_names:
            self.declare(self.symbols, name, "function")
            self.function_names.add(name.text)
        if self.accept(";"):
            if extern and name.text not in module.functions:
                module.externs.add(name.text)
            return
        if name.text in module.functions:
            raise self.error(f"function '{name.text}' is defined twice (line {module.functions[name.text].line})", name)
        if self.peek().kind == "directive":
            raise self.error(f"unsupported function directive '{self.peek().text}'", self.peek())
        self.expect("{", "'{' opening the function body")
        function = Entry(name.text, params, line=token.line, returns=returns)
        self.entry = function
        self.body()
        self.entry = None
        module.externs.discard(name.text)
        module.functions[name.text] = function

    def call_operands(self, scope) -> list[Operand]:
        """`[(ret, ...),] name[, (arg, ...)]` -> [Vector(returns), Symbol(name), Vector(arguments)]."""
        returns: tuple[Operand, ...] = ()
        if self.accept("("):
            returns = self.call_list(scope)
            self.expect(",", "',' after the return parameters")
        target = self.expect("name", "the called function")
        if target.text not in self.function_names:
            what = "a register" if target.text.startswith("%") or self.lookup(target.text, scope) else "not a function"
            raise self.error(f"call target '{target.text}' is {what}: indirect calls are not supported", target)
        arguments: tuple[Operand, ...] = ()
        if self.accept(","):
            self.expect("(", "'(' opening the call arguments")
            arguments = self.call_list(scope)
        if self.peek().kind == ",":
            raise self.error("call with a prototype or target list (an indirect call) is not supported", self.peek())
        return [Vector(returns), Symbol(target.text), Vector(arguments)]

    def call_list(self, scope) -> tuple[Operand, ...]:
        """Operands to the ')' ('(' already read)."""
        found: list[Operand] = []
        if not self.accept(")"):
            found.append(self.scalar(scope))
            while self.accept(","):
                found.append(self.scalar(scope))
            self.expect(")", "',' or ')' in a call")
        return tuple(found)
