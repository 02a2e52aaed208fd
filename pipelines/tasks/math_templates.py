"""The wordings of the Spanish arithmetic problems: the ones post-training sees, and the
ones kept for evaluation only.

A model that learned one template has not learned the task: changing only the verb of a
problem it solves turns a right answer into a wrong one. So training draws from many
wordings (several verbs and sentence shapes per operation, and bare arithmetic), and
evaluation has its own wordings that no training problem ever uses (`HELDOUT_TEMPLATES`:
other verbs, other sentence shapes, "¿Cuánto es a más b?"). With the held-out operand
pairs (`math_tasks.operand_pool`), a problem of the "rephrased" sets is new to the model
twice over: its numbers and its wording.

Placeholders: {a} {b} operands ({a} is the 1-digit factor in "mul"), {n1} {n2} names,
{o} a counted object (plural) and {q} "¿Cuántos"/"¿Cuántas" agreeing with it, {c_sg}
{c_pl} a container. A template without {o} fixes its own noun and its agreement.
"""

from __future__ import annotations

NAMES = ("Lucía", "Mateo", "Sofía", "Hugo", "Valentina", "Martín", "Paula", "Diego", "Carmen",
         "Javier", "Elena", "Pablo", "Marta", "Andrés", "Alba", "Tomás", "Irene", "Nicolás")
# (plural, gender): the gender picks "¿Cuántos" / "¿Cuántas" so the question agrees.
OBJECTS = (("manzanas", "f"), ("naranjas", "f"), ("canicas", "f"), ("galletas", "f"),
           ("pegatinas", "f"), ("flores", "f"), ("caramelos", "m"), ("cromos", "m"),
           ("lápices", "m"), ("globos", "m"), ("botones", "m"), ("libros", "m"))
CONTAINERS = (("caja", "cajas"), ("bolsa", "bolsas"), ("paquete", "paquetes"), ("bote", "botes"))

TEMPLATES: dict[str, tuple[str, ...]] = {
    "add": (
        "{n1} tiene {a} {o} y compra {b} más. {q} {o} tiene ahora?",
        "En una caja hay {a} {o} y en otra caja hay {b}. {q} {o} hay en total?",
        "{n1} tiene {a} {o} y {n2} le regala {b}. {q} {o} tiene {n1} ahora?",
        "{n1} junta {a} {o} el lunes y {b} el martes. {q} {o} junta en total?",
        ("Un tren lleva {a} pasajeros. En la siguiente estación suben {b} pasajeros más. "
         "¿Cuántos pasajeros lleva ahora el tren?"),
        "{n1} leyó {a} páginas el sábado y {b} el domingo. ¿Cuántas páginas leyó en total?",
        "{n1} recoge {a} {o} en el parque y después encuentra {b} más. {q} {o} tiene?",
        "{n1} gana {a} puntos en la primera partida y {b} en la segunda. ¿Cuántos puntos gana en total?",
        "Calcula {a} + {b}.",
        "Suma {a} y {b}.",
        "¿Cuál es el resultado de sumar {a} y {b}?",
    ),
    "sub": (
        "{n1} tiene {a} {o} y le regala {b} a {n2}. {q} {o} le quedan?",
        "En una tienda había {a} {o}. Hoy se vendieron {b}. {q} {o} quedan en la tienda?",
        "{n1} quiere reunir {a} {o} y ya tiene {b}. {q} {o} le faltan?",
        ("Un autobús lleva {a} pasajeros y en una parada se bajan {b}. "
         "¿Cuántos pasajeros quedan en el autobús?"),
        "{n1} tenía {a} euros y gastó {b} euros en un regalo. ¿Cuántos euros le quedan?",
        "{n1} tenía {a} {o} y perdió {b}. {q} {o} tiene ahora?",
        "De sus {a} {o}, {n1} usa {b}. {q} {o} no usa?",
        "Calcula {a} - {b}.",
        "Resta {b} de {a}.",
        "¿Cuál es la diferencia entre {a} y {b}?",
    ),
    "mul": (
        "{n1} compra {a} {c_pl} de {o}. Cada {c_sg} trae {b} {o}. {q} {o} compra en total?",
        "En un teatro hay {a} filas con {b} butacas cada una. ¿Cuántas butacas hay en total?",
        "{n1} ahorra {b} euros cada semana durante {a} semanas. ¿Cuántos euros ahorra en total?",
        "Un paquete trae {b} {o}. {q} {o} hay en {a} paquetes?",
        "{n1} reparte {o} entre {a} amigos y le da {b} a cada uno. {q} {o} reparte en total?",
        "Hay {a} mesas y en cada mesa se sientan {b} personas. ¿Cuántas personas hay?",
        "Calcula {a} × {b}.",
        "Multiplica {a} por {b}.",
        "¿Cuál es el producto de {a} y {b}?",
    ),
}

# Evaluation only: verbs, shapes and bare forms that no training template uses.
HELDOUT_TEMPLATES: dict[str, tuple[str, ...]] = {
    "add": (
        "¿Cuánto es {a} más {b}?",
        "Por la mañana llegan {a} cartas y por la tarde llegan {b}. ¿Cuántas cartas llegan ese día?",
        "{n1} y {n2} juntan sus {o}: {n1} aporta {a} y {n2} aporta {b}. {q} {o} reúnen entre los dos?",
        "Una granja tiene {a} gallinas y compra {b} gallinas más. ¿Cuántas gallinas tiene la granja?",
        "{n1} guarda {a} {o} en un cajón y mete {b} más. {q} {o} hay en el cajón?",
    ),
    "sub": (
        "¿Cuánto es {a} menos {b}?",
        "De {a} {o}, {n1} pierde {b}. {q} {o} conserva?",
        "Un depósito tiene {a} litros de agua y se gastan {b} litros. ¿Cuántos litros quedan en el depósito?",
        "{n1} debe leer {a} páginas y ya ha leído {b}. ¿Cuántas páginas le quedan por leer?",
        "En un aparcamiento hay {a} coches y salen {b}. ¿Cuántos coches siguen en el aparcamiento?",
    ),
    "mul": (
        "¿Cuánto es {a} por {b}?",
        "Cada día {n1} camina {b} minutos. ¿Cuántos minutos camina en {a} días?",
        "Un edificio tiene {a} pisos y en cada piso viven {b} personas. ¿Cuántas personas viven en el edificio?",
        "{n1} llena {a} {c_pl} y pone {b} {o} en cada {c_sg}. {q} {o} guarda?",
        "Si un cuaderno cuesta {b} euros, ¿cuántos euros cuestan {a} cuadernos?",
    ),
}

SOLUTIONS = {
    "add": "Hay que sumar las dos cantidades: {a} + {b} = {c}.",
    "sub": "Hay que restar {b} de {a}: {a} - {b} = {c}.",
    "mul": "Hay que multiplicar {a} por {b}: {a} × {b} = {c}.",
}
